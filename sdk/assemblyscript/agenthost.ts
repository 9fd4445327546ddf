// Thin SDK for agenthost wasm inputPolicy guests in AssemblyScript, ABI v1
// (abi/guestabi/SPEC.md): the request region, the request's header fields,
// the decision, the manifest and error results. It allocates nothing per
// call (the request is read in place, results are written into static
// memory), so a guest built with `--runtime stub` does not leak.
// guests/examples/assemblyscript is a complete guest.

// Actions.
export const QUEUE: u8 = 1;
export const INJECT: u8 = 2;
export const INTERRUPT: u8 = 3;
export const REJECT: u8 = 4;

const ACTION_NAMES: StaticArray<string> = ["", "queue", "inject", "interrupt", "reject"];

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
  outLen = 0;
  put(0);
  putRaw("{\"abi\":1,\"name\":");
  putString(name);
  putRaw(",\"version\":");
  putString(version);
  putRaw(",\"hooks\":[\"inputPolicy\"],\"actions\":[");
  let first = true;
  for (let a = 1; a <= 4; a++) {
    if ((actions & (1 << a)) == 0) continue;
    if (!first) put(0x2c);
    first = false;
    putString(ACTION_NAMES[a]);
  }
  putRaw("]}");
  if (outLen > OUT_SIZE) return errorResult("manifest does not fit");
  return pack(OUT, outLen);
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
