/*
 * The example inputPolicy and toolPolicy guest (guests/examples/README.md)
 * in C, against
 * agenthost wasm guest ABI v1 (abi/guestabi/SPEC.md). Freestanding: no libc,
 * no WASI, no imports. Built by build.sh with clang and lld.
 */
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define EXPORT(name) __attribute__((export_name(name)))

enum { QUEUE = 1, INJECT = 2, INTERRUPT = 3, REJECT = 4 };

/* Results live in static memory; clang never places data at address 0. */
static u8 decision[4];
static const char malformed[] = "\1request does not decode";
static const char manifest_body[] =
	"\0{\"abi\":1,\"name\":\"example-c\",\"version\":\"1.0.0\","
	"\"hooks\":[\"inputPolicy\",\"toolPolicy\"],"
	"\"actions\":[\"queue\",\"inject\",\"interrupt\",\"reject\"]}";
/* Tool decisions: status, decision, approvals, reserved, then the text. */
static const char tool_allow[] = "\0\1\0\0";
static const char tool_deny[] = "\0\2\0\0shell_exec is not allowed";
static const char tool_ask[] = "\0\3\1\0Approve this deletion?";

static u64 pack(const void *p, u32 n) { return ((u64)(u32)p << 32) | n; }

EXPORT("agenthost_abi_version") int abi_version(void) { return 1; }

EXPORT("agenthost_manifest") u64 manifest(void) {
	return pack(manifest_body, sizeof manifest_body - 1);
}

/*
 * The request region: at the end of memory, grown in place when a request
 * does not fit (nothing else grows memory, so it stays at the end). It is
 * never at address 0, the "cannot allocate" answer.
 */
static u32 region, cap;

EXPORT("agenthost_alloc") u32 alloc(u32 size) {
	if (size <= cap) return region;
	u32 end = (u32)__builtin_wasm_memory_size(0) << 16;
	if (region + cap != end) { /* first region */
		region = end;
		cap = 0;
	}
	u32 pages = (size - cap + 65535) >> 16;
	if (__builtin_wasm_memory_grow(0, pages) == (__SIZE_TYPE__)-1) return 0;
	cap += pages << 16;
	return region;
}

static u32 le32(const u8 *p) { return p[0] | p[1] << 8 | p[2] << 16 | (u32)p[3] << 24; }

/* str reads the string at *p (a u32 length, then bytes) if it fits before
 * end, setting *s and *n and advancing *p. */
static int str(const u8 **p, const u8 *end, const u8 **s, u32 *n) {
	if (end - *p < 4) return 0;
	*n = le32(*p);
	if ((u32)(end - *p - 4) < *n) return 0;
	*s = *p + 4;
	*p = *s + *n;
	return 1;
}

static int is(const u8 *s, u32 n, const char *lit, u32 litn) {
	if (n != litn) return 0;
	for (u32 i = 0; i < n; i++)
		if (s[i] != (u8)lit[i]) return 0;
	return 1;
}

static u64 decide(u8 action, u8 coalesce) {
	decision[0] = 0;
	decision[1] = action;
	decision[2] = coalesce;
	decision[3] = 0;
	return pack(decision, 4);
}

EXPORT("agenthost_input_policy") u64 input_policy(const u8 *req, u32 len) {
	const u8 *end = req + len, *p = req + 16, *thread, *content, *hint;
	u32 tn, cn, hn;
	if (len < 16 || req[0] != 1 || !str(&p, end, &thread, &tn) ||
	    !str(&p, end, &content, &cn) || !str(&p, end, &hint, &hn))
		return pack(malformed, sizeof malformed - 1);
	int active = req[1] & 1;
	u32 queued = le32(req + 8);
	if (is(hint, hn, "stop", 4)) return decide(INTERRUPT, 0);
	if (active && is(hint, hn, "refine", 6)) return decide(INJECT, 0);
	if (cn == 0) return decide(REJECT, 0);
	return decide(QUEUE, queued > 0);
}

/* contains reports whether the n bytes at s contain the text lit. */
static int contains(const u8 *s, u32 n, const char *lit, u32 litn) {
	for (u32 i = 0; i + litn <= n; i++)
		if (is(s + i, litn, lit, litn)) return 1;
	return 0;
}

/* The tool policy: deny shell_exec, ask one person before a tool whose name
 * contains "delete" runs, allow the rest. Only the name is read. */
EXPORT("agenthost_tool_policy") u64 tool_policy(const u8 *req, u32 len) {
	const u8 *end = req + len, *p = req + 8, *name;
	u32 n;
	if (len < 8 || req[0] != 1 || !str(&p, end, &name, &n))
		return pack(malformed, sizeof malformed - 1);
	if (is(name, n, "shell_exec", 10)) return pack(tool_deny, sizeof tool_deny - 1);
	if (contains(name, n, "delete", 6)) return pack(tool_ask, sizeof tool_ask - 1);
	return pack(tool_allow, sizeof tool_allow - 1);
}
