/*
 * refine: the standard "refine" inputPolicy guest, in C, against agenthost
 * wasm guest ABI v1 (abi/guestabi/SPEC.md). Freestanding: no libc, no WASI,
 * one import (agenthost.log). Built by build.sh.
 *
 * Decides exactly as guests/policy/rules.Refine:
 *   hint "refine" -> inject; hint "redirect" -> interrupt;
 *   the word "stop" or "cancel" in the text -> interrupt;
 *   text starting with the word "actually" or "also", or containing
 *   "bullet point", "shorter", "more concise" or "more detail" -> inject;
 *   anything else -> queue.
 * Config (agenthost_init): JSON {"coalescePending": true|false}; only that
 * member is understood, anything else is a configuration error.
 */
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define EXPORT(name) __attribute__((export_name(name)))

__attribute__((import_module("agenthost"), import_name("log")))
void host_log(int level, const char *msg, u32 len);

enum { QUEUE = 1, INJECT = 2, INTERRUPT = 3, REJECT = 4 };

static int coalesce;

/* Requests are written here; bigger ones get a region grown at the end of
 * memory. */
static u8 inbuf[8192];
static u8 *big;
static u32 bigcap;
static u8 out[512];

static u64 pack(const void *p, u32 n) { return ((u64)(u32)p << 32) | n; }

static u32 slen(const char *s) { u32 n = 0; while (s[n]) n++; return n; }

static u64 error(const char *msg) {
	u32 n = slen(msg);
	if (n > sizeof out - 1) n = sizeof out - 1;
	out[0] = 1;
	for (u32 i = 0; i < n; i++) out[1 + i] = (u8)msg[i];
	return pack(out, n + 1);
}

static u64 ok(const char *body) {
	u32 n = slen(body);
	out[0] = 0;
	for (u32 i = 0; i < n; i++) out[1 + i] = (u8)body[i];
	return pack(out, n + 1);
}

EXPORT("agenthost_abi_version") int abi_version(void) { return 1; }

EXPORT("agenthost_alloc") u32 alloc(u32 size) {
	if (size <= sizeof inbuf) return (u32)inbuf;
	if (size <= bigcap) return (u32)big;
	u32 pages = (size + 65535) / 65536;
	int old = __builtin_wasm_memory_grow(0, pages);
	if (old < 0) return 0;
	big = (u8 *)((u32)old * 65536);
	bigcap = pages * 65536;
	return (u32)big;
}

/* --- configuration: {"coalescePending": true|false} ----------------------- */

static int is_space(u8 c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int eat(const u8 *p, u32 n, u32 *i, const char *lit) {
	while (*i < n && is_space(p[*i])) (*i)++;
	u32 l = slen(lit);
	if (n - *i < l) return 0;
	for (u32 j = 0; j < l; j++)
		if (p[*i + j] != (u8)lit[j]) return 0;
	*i += l;
	return 1;
}

EXPORT("agenthost_init") u64 init(const u8 *p, u32 n) {
	u32 i = 0;
	coalesce = 0;
	while (i < n && is_space(p[i])) i++;
	if (i == n) return ok("");
	if (!eat(p, n, &i, "{")) return error("config: want a JSON object");
	if (eat(p, n, &i, "}")) goto end;
	if (!eat(p, n, &i, "\"coalescePending\"") || !eat(p, n, &i, ":"))
		return error("config: the only member is \"coalescePending\"");
	if (eat(p, n, &i, "true")) coalesce = 1;
	else if (!eat(p, n, &i, "false")) return error("config: coalescePending must be true or false");
	if (!eat(p, n, &i, "}")) return error("config: the only member is \"coalescePending\"");
end:
	while (i < n && is_space(p[i])) i++;
	if (i != n) return error("config: trailing bytes");
	return ok("");
}

EXPORT("agenthost_manifest") u64 manifest(void) {
	return ok("{\"abi\":1,\"name\":\"refine-c\",\"version\":\"1.0.0\","
	          "\"hooks\":[\"inputPolicy\"],\"actions\":[\"queue\",\"inject\",\"interrupt\"]}");
}

/* --- the policy -------------------------------------------------------------- */

/*
 * The matching is written for wazero's interruptible mode, in which every
 * iteration of a loop costs a check in the host: it scans 8 bytes per
 * iteration (lower-casing them with SWAR arithmetic) and looks closer only
 * at the positions holding 's', 'c', 'b' or 'm', the first letters of the
 * phrases it looks for.
 */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* lower8 lower-cases the ASCII letters among 8 bytes. */
static u64 lower8(u64 x) {
	u64 h = x & ~HIGHS;
	u64 ge_a = h + ONES * (0x80 - 'A');
	u64 gt_z = h + ONES * (0x80 - 'Z' - 1);
	return x | ((ge_a & ~gt_z & ~x & HIGHS) >> 2);
}

/* zero_bytes has the high bit set in every byte of x that is 0 (and maybe in
 * bytes above one that is; callers only use the lowest). */
static u64 zero_bytes(u64 x) { return (x - ONES) & ~x & HIGHS; }

static u64 load8(const u8 *p) { u64 v; __builtin_memcpy(&v, p, 8); return v; }

/* lit packs up to 8 bytes of a literal, little endian. */
#define L8(a,b,c,d,e,f,g,h) ((u64)(a) | (u64)(b)<<8 | (u64)(c)<<16 | (u64)(d)<<24 | \
	(u64)(e)<<32 | (u64)(f)<<40 | (u64)(g)<<48 | (u64)(h)<<56)

static u8 lower(u8 c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static int letter(u8 c) { c = lower(c); return c >= 'a' && c <= 'z'; }

/* The text is copied to textbuf, padded with zeros to a multiple of 8 plus
 * 16 bytes, so that every load is in bounds and reads zeros past the end. */
static u8 small_text[1024];
static u8 *text = small_text;
static u32 textcap = sizeof small_text;

/* grow_text makes room for n bytes of text and padding; 0 if it cannot. */
static int grow_text(u32 n) {
	if (n + 32 <= textcap) return 1;
	u32 pages = (n + 32 + 65535) / 65536;
	int old = __builtin_wasm_memory_grow(0, pages);
	if (old < 0) return 0;
	text = (u8 *)((u32)old * 65536);
	textcap = pages * 65536;
	return 1;
}

/* window returns the 8 lower-cased bytes of text at i. */
static u64 window(u32 i) { return lower8(load8(text + i)); }

static u64 mask(u32 n) { return n >= 8 ? ~0ULL : (1ULL << (n * 8)) - 1; }

/* word_end reports whether the phrase of length l at i ends a word. */
static int word_end(u32 i, u32 l, u32 n) { return i + l >= n || !letter(text[i + l]); }

enum { SEEN_NONE = 0, SEEN_REFINE = 1, SEEN_STOP = 2 };

/* at checks the phrases that start with text[i]. */
static int at(u32 i, u32 n) {
	u64 w = window(i);
	int word_start = i == 0 || !letter(text[i - 1]);
	switch ((u8)w) {
	case 's':
		if (word_start && (w & mask(4)) == L8('s','t','o','p',0,0,0,0) && word_end(i, 4, n)) return SEEN_STOP;
		if ((w & mask(7)) == L8('s','h','o','r','t','e','r',0)) return SEEN_REFINE;
		break;
	case 'c':
		if (word_start && (w & mask(6)) == L8('c','a','n','c','e','l',0,0) && word_end(i, 6, n)) return SEEN_STOP;
		break;
	case 'b':
		if (w == L8('b','u','l','l','e','t',' ','p') && (window(i + 8) & mask(4)) == L8('o','i','n','t',0,0,0,0))
			return SEEN_REFINE;
		break;
	case 'm':
		if (w == L8('m','o','r','e',' ','c','o','n') && (window(i + 8) & mask(4)) == L8('c','i','s','e',0,0,0,0))
			return SEEN_REFINE;
		if (w == L8('m','o','r','e',' ','d','e','t') && (window(i + 8) & mask(3)) == L8('a','i','l',0,0,0,0,0))
			return SEEN_REFINE;
		break;
	}
	return SEEN_NONE;
}

static int equal_fold(const u8 *s, u32 n, const char *lw, u32 l) {
	if (n != l) return 0;
	for (u32 j = 0; j < l; j++)
		if (lower(s[j]) != (u8)lw[j]) return 0;
	return 1;
}

static int decide(const u8 *hint, u32 hn, const u8 *t, u32 tn) {
	if (equal_fold(hint, hn, "refine", 6)) return INJECT;
	if (equal_fold(hint, hn, "redirect", 8)) return INTERRUPT;
	while (tn > 0 && (*t == ' ' || *t == '\t' || *t == '\r' || *t == '\n')) t++, tn--;
	__builtin_memcpy(text, t, tn);
	__builtin_memset(text + tn, 0, ((tn + 7) & ~7u) - tn + 16);
	int seen = SEEN_NONE;
	for (u32 base = 0; base < tn; base += 8) {
		u64 w = window(base);
		/* positions holding s, c, b or m */
		u64 cand = zero_bytes(w ^ (ONES * 's')) | zero_bytes(w ^ (ONES * 'c')) |
		           zero_bytes(w ^ (ONES * 'b')) | zero_bytes(w ^ (ONES * 'm'));
		while (cand) {
			u32 i = base + (u32)__builtin_ctzll(cand) / 8;
			cand &= cand - 1;
			if (i >= tn) break;
			seen |= at(i, tn);
		}
		if (seen & SEEN_STOP) return INTERRUPT;
	}
	if (seen & SEEN_REFINE) return INJECT;
	u64 w = window(0);
	if (w == L8('a','c','t','u','a','l','l','y') && word_end(0, 8, tn)) return INJECT;
	if ((w & mask(4)) == L8('a','l','s','o',0,0,0,0) && word_end(0, 4, tn)) return INJECT;
	return QUEUE;
}

static u32 le32(const u8 *p) { return p[0] | p[1] << 8 | p[2] << 16 | (u32)p[3] << 24; }

/* str reads a length-prefixed string at *off; 0 if it does not fit. */
static int str(const u8 *p, u32 n, u32 *off, const u8 **s, u32 *sn) {
	if (n - *off < 4) return 0;
	u32 l = le32(p + *off);
	*off += 4;
	if (n - *off < l) return 0;
	*s = p + *off;
	*sn = l;
	*off += l;
	return 1;
}

EXPORT("agenthost_input_policy") u64 input_policy(const u8 *p, u32 n) {
	/* Only the fixed header, thread id, content and hint are needed; the
	 * rest of the request is not read. */
	const u8 *thread, *content, *hint;
	u32 tn, cn, hn, off = 16;
	if (n < 16 || p[0] != 1) return error("request: bad layout version");
	if (!str(p, n, &off, &thread, &tn) || !str(p, n, &off, &content, &cn) ||
	    !str(p, n, &off, &hint, &hn))
		return error("request: truncated");
	if (!grow_text(cn)) return error("out of memory for the content");
	out[0] = 0;
	out[1] = (u8)decide(hint, hn, content, cn);
	out[2] = coalesce ? 1 : 0;
	out[3] = 0;
	return pack(out, 4);
}
