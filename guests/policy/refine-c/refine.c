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

static u8 lower(u8 c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static int letter(u8 c) { c = lower(c); return c >= 'a' && c <= 'z'; }

static int match_at(const u8 *s, u32 n, u32 i, const char *lw) {
	u32 l = slen(lw);
	if (n - i < l) return 0;
	for (u32 j = 0; j < l; j++)
		if (lower(s[i + j]) != (u8)lw[j]) return 0;
	return 1;
}

static int has(const u8 *s, u32 n, const char *lw) {
	u32 l = slen(lw);
	for (u32 i = 0; i + l <= n; i++)
		if (match_at(s, n, i, lw)) return 1;
	return 0;
}

static int word_at(const u8 *s, u32 n, u32 i, const char *lw) {
	if (!match_at(s, n, i, lw)) return 0;
	if (i > 0 && letter(s[i - 1])) return 0;
	u32 end = i + slen(lw);
	return end == n || !letter(s[end]);
}

static int has_word(const u8 *s, u32 n, const char *lw) {
	u32 l = slen(lw);
	for (u32 i = 0; i + l <= n; i++)
		if (word_at(s, n, i, lw)) return 1;
	return 0;
}

static int equal_fold(const u8 *s, u32 n, const char *lw) {
	return n == slen(lw) && match_at(s, n, 0, lw);
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

static int decide(const u8 *hint, u32 hn, const u8 *t, u32 tn) {
	if (equal_fold(hint, hn, "refine")) return INJECT;
	if (equal_fold(hint, hn, "redirect")) return INTERRUPT;
	while (tn > 0 && (*t == ' ' || *t == '\t' || *t == '\r' || *t == '\n')) t++, tn--;
	if (has_word(t, tn, "stop") || has_word(t, tn, "cancel")) return INTERRUPT;
	if (word_at(t, tn, 0, "actually") || word_at(t, tn, 0, "also") ||
	    has(t, tn, "bullet point") || has(t, tn, "shorter") ||
	    has(t, tn, "more concise") || has(t, tn, "more detail"))
		return INJECT;
	return QUEUE;
}

EXPORT("agenthost_input_policy") u64 input_policy(const u8 *p, u32 n) {
	/* Only the header, thread id, content and hint are needed; the rest of
	 * the request is not read. */
	const u8 *thread, *content, *hint;
	u32 tn, cn, hn, off = 4;
	if (n < 4 || p[0] != 1) return error("request: bad layout version");
	if (!str(p, n, &off, &thread, &tn) || !str(p, n, &off, &content, &cn) ||
	    !str(p, n, &off, &hint, &hn))
		return error("request: truncated");
	out[0] = 0;
	out[1] = (u8)decide(hint, hn, content, cn);
	out[2] = coalesce ? 1 : 0;
	out[3] = 0;
	return pack(out, 4);
}
