// Thin SDK for agenthost wasm inputPolicy and toolPolicy guests in
// AssemblyScript, ABI v1 (abi/guestabi/SPEC.md): the request region, the
// requests' fields, the decisions, the manifest and error results. It allocates nothing per
// call (the request is read in place, results are written into static
// memory), so a guest built with `--runtime stub` does not leak.
// guests/examples/assemblyscript is a complete guest.

// Actions.
export const QUEUE: u8 = 1;
export const INJECT: u8 = 2;
export const INTERRUPT: u8 = 3;
export const REJECT: u8 = 4;

const ACTION_NAMES: StaticArray<string> = ["", "queue", "inject", "interrupt", "reject"];

// Tool decisions (SPEC §14.2).
export const ALLOW: u8 = 1;
export const DENY: u8 = 2;
export const ASK: u8 = 3;
// The longest text (deny message, ask prompt) the host keeps, and the most
// approvals an ask may require.
export const MAX_TOOL_TEXT: i32 = 4096;
export const MAX_APPROVALS: u8 = 16;

// Hooks, as a bit set for manifestHooks.
export const HOOK_INPUT_POLICY: u32 = 1;
export const HOOK_PREPARE_STEP: u32 = 2;
export const HOOK_TOOL_POLICY: u32 = 4;

const HOOK_NAMES: StaticArray<string> = ["inputPolicy", "prepareStep", "toolPolicy"];

// ---- the request region ---------------------------------------------------

let region: usize = 0;
let regionCap: usize = 0;

// allocRegion implements agenthost_alloc: a region of at least size bytes,
// reused while requests fit and reallocated (in place when it is the heap's
// last block) when one does not. Never 0; running out of memory traps,
// which fails the call.
export function allocRegion(size: u32): usize {
  if (<usize>size <= regionCap) return region;
  region = region == 0 ? heap.alloc(<usize>size) : heap.realloc(region, <usize>size);
  regionCap = <usize>size;
  return region;
}

// ---- the request ----------------------------------------------------------

// The decoded request, valid during the call: parseRequest sets these.
export let active: bool = false;
export let activeSteps: u32 = 0;
export let queued: u32 = 0;
export let metadataPairs: u32 = 0;
export let threadIdPtr: usize = 0;
export let threadIdLen: u32 = 0;
export let contentPtr: usize = 0;
export let contentLen: u32 = 0;
export let hintPtr: usize = 0;
export let hintLen: u32 = 0;
// restPtr/restLen: what follows the hint (metadata, then the runs).
export let restPtr: usize = 0;
export let restLen: u32 = 0;

// Errors of parseRequest.
export const OK: i32 = 0;
export const TRUNCATED: i32 = 1;
export const BAD_LAYOUT: i32 = 2;

let strPtr: usize = 0;
let strLen: u32 = 0;

// readStr reads the str (u32 length, bytes) at p if it ends by end, setting
// strPtr and strLen; it returns the address after it, or 0.
export function readStr(p: usize, end: usize): usize {
  if (end < p || end - p < 4) return 0;
  const n = load<u32>(p);
  if (<usize>n > end - p - 4) return 0;
  strPtr = p + 4;
  strLen = n;
  return p + 4 + <usize>n;
}

// parseRequest decodes the header, the thread id, the content and the hint
// of the request at ptr; it returns OK or an error code.
export function parseRequest(ptr: usize, len: u32): i32 {
  const end = ptr + <usize>len;
  if (len < 16) return TRUNCATED;
  if (load<u8>(ptr) != 1) return BAD_LAYOUT;
  active = (load<u8>(ptr, 1) & 1) != 0;
  activeSteps = load<u32>(ptr, 4);
  queued = load<u32>(ptr, 8);
  metadataPairs = load<u32>(ptr, 12);
  let p = readStr(ptr + 16, end);
  if (p == 0) return TRUNCATED;
  threadIdPtr = strPtr; threadIdLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  contentPtr = strPtr; contentLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  hintPtr = strPtr; hintLen = strLen;
  restPtr = p; restLen = <u32>(end - p);
  return OK;
}

// The decoded toolPolicy request, valid during the call: parseToolRequest
// sets these. The strings are addresses and lengths in the request.
export let toolStep: u32 = 0;
export let toolPtr: usize = 0;
export let toolLen: u32 = 0;
export let serverPtr: usize = 0;
export let serverLen: u32 = 0;
export let argumentsPtr: usize = 0;
export let argumentsLen: u32 = 0;
export let callIdPtr: usize = 0;
export let callIdLen: u32 = 0;
export let idempotencyKeyPtr: usize = 0;
export let idempotencyKeyLen: u32 = 0;
export let runIdPtr: usize = 0;
export let runIdLen: u32 = 0;
export let toolThreadIdPtr: usize = 0;
export let toolThreadIdLen: u32 = 0;

// parseToolRequest decodes the toolPolicy request at ptr (SPEC §14.1); it
// returns OK or an error code.
export function parseToolRequest(ptr: usize, len: u32): i32 {
  const end = ptr + <usize>len;
  if (len < 8) return TRUNCATED;
  if (load<u8>(ptr) != 1) return BAD_LAYOUT;
  toolStep = load<u32>(ptr, 4);
  let p = readStr(ptr + 8, end);
  if (p == 0) return TRUNCATED;
  toolPtr = strPtr; toolLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  serverPtr = strPtr; serverLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  argumentsPtr = strPtr; argumentsLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  callIdPtr = strPtr; callIdLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  idempotencyKeyPtr = strPtr; idempotencyKeyLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  runIdPtr = strPtr; runIdLen = strLen;
  p = readStr(p, end);
  if (p == 0) return TRUNCATED;
  toolThreadIdPtr = strPtr; toolThreadIdLen = strLen;
  return OK;
}

// bytesContain reports whether the len bytes at ptr contain the ASCII text
// s.
export function bytesContain(ptr: usize, len: u32, s: string): bool {
  const n = <u32>s.length;
  if (n > len) return false;
  for (let i: u32 = 0; i <= len - n; i++) {
    if (bytesEqual(ptr + <usize>i, n, s)) return true;
  }
  return false;
}

// bytesEqual reports whether the len bytes at ptr are the ASCII text s.
export function bytesEqual(ptr: usize, len: u32, s: string): bool {
  if (<i32>len != s.length) return false;
  for (let i = 0; i < s.length; i++) {
    if (<i32>load<u8>(ptr + <usize>i) != s.charCodeAt(i)) return false;
  }
  return true;
}

// ---- results --------------------------------------------------------------

const DECISION = memory.data(4);
const OUT_SIZE: i32 = 1024;
const OUT = memory.data(OUT_SIZE);

function pack(ptr: usize, len: i32): u64 {
  return (<u64>ptr << 32) | <u64>(<u32>len);
}

// decision encodes a decision and returns the packed result.
export function decision(action: u8, coalescePending: bool): u64 {
  store<u8>(DECISION, 0);
  store<u8>(DECISION, action, 1);
  store<u8>(DECISION, coalescePending ? 1 : 0, 2);
  store<u8>(DECISION, 0, 3);
  return pack(DECISION, 4);
}

let outLen: i32 = 0;

function put(c: i32): void {
  if (outLen < OUT_SIZE) store<u8>(OUT + <usize>outLen, <u8>c);
  outLen++;
}

// putString writes s as a JSON string; characters outside ASCII are written
// as \u escapes.
function putString(s: string): void {
  put(0x22);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22 || c == 0x5c) { put(0x5c); put(c); }
    else if (c < 0x20 || c > 0x7e) {
      put(0x5c); put(0x75);
      for (let k = 12; k >= 0; k -= 4) put(<i32>"0123456789abcdef".charCodeAt((c >> k) & 15));
    } else put(c);
  }
  put(0x22);
}

function putRaw(s: string): void {
  for (let i = 0; i < s.length; i++) put(s.charCodeAt(i));
}

// manifest writes the manifest of an inputPolicy guest returning the given
// actions (a bit set: 1 << QUEUE | 1 << INJECT ...) and returns the packed
// result, or an error result if it does not fit.
export function manifest(name: string, version: string, actions: u32): u64 {
  return manifestHooks(name, version, HOOK_INPUT_POLICY, actions);
}

// manifestHooks writes the manifest of a guest implementing the given hooks
// (a bit set: HOOK_INPUT_POLICY | HOOK_TOOL_POLICY ...) and, if any, the
// given actions (required with HOOK_INPUT_POLICY), and returns the packed
// result, or an error result if it does not fit.
export function manifestHooks(name: string, version: string, hooks: u32, actions: u32): u64 {
  outLen = 0;
  put(0);
  putRaw("{\"abi\":1,\"name\":");
  putString(name);
  putRaw(",\"version\":");
  putString(version);
  putRaw(",\"hooks\":[");
  let first = true;
  for (let h = 0; h < HOOK_NAMES.length; h++) {
    if ((hooks & (1 << h)) == 0) continue;
    if (!first) put(0x2c);
    first = false;
    putString(HOOK_NAMES[h]);
  }
  put(0x5d);
  if (actions != 0) {
    putRaw(",\"actions\":[");
    first = true;
    for (let a = 1; a <= 4; a++) {
      if ((actions & (1 << a)) == 0) continue;
      if (!first) put(0x2c);
      first = false;
      putString(ACTION_NAMES[a]);
    }
    put(0x5d);
  }
  put(0x7d);
  if (outLen > OUT_SIZE) return errorResult("manifest does not fit");
  return pack(OUT, outLen);
}

// toolDecision encodes a toolPolicy decision and returns the packed result:
// the verdict (ALLOW, DENY, ASK), the approvals (ask only; 0 means 1, more
// than MAX_APPROVALS are cut to it) and the text (deny's message, ask's
// prompt; ignored for allow), written as UTF-8 and cut to fit the result
// buffer (1020 bytes).
export function toolDecision(verdict: u8, approvals: u8, text: string): u64 {
  outLen = 0;
  put(0);
  put(verdict);
  put(verdict == ASK ? min(approvals, MAX_APPROVALS) : 0);
  put(0);
  if (verdict != ALLOW) putUTF8(text);
  return pack(OUT, min(outLen, OUT_SIZE));
}

// putUTF8 writes s as UTF-8, stopping before a character that does not fit
// whole. An unpaired surrogate becomes U+FFFD.
function putUTF8(s: string): void {
  for (let i = 0; i < s.length; i++) {
    let c = <i32>s.charCodeAt(i);
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
      const d = <i32>s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
    const n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (outLen + n > OUT_SIZE) return;
    if (n == 1) put(c);
    else if (n == 2) { put(0xc0 | c >> 6); put(0x80 | c & 63); }
    else if (n == 3) { put(0xe0 | c >> 12); put(0x80 | c >> 6 & 63); put(0x80 | c & 63); }
    else { put(0xf0 | c >> 18); put(0x80 | c >> 12 & 63); put(0x80 | c >> 6 & 63); put(0x80 | c & 63); }
  }
}

// errorResult returns an error result with message msg (cut to fit).
export function errorResult(msg: string): u64 {
  outLen = 0;
  put(1);
  putRaw(msg);
  return pack(OUT, min(outLen, OUT_SIZE));
}

// parseError returns the error result for an error code of parseRequest.
export function parseError(code: i32): u64 {
  return errorResult(code == BAD_LAYOUT
    ? "request does not decode: unknown layout version"
    : "request does not decode: truncated");
}
