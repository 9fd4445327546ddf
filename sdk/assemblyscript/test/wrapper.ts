// Exposes the SDK to test.mjs, which drives it from JavaScript.
export {
  allocRegion, parseRequest, decision,
  active, activeSteps, queued, metadataPairs, threadIdPtr, threadIdLen,
  contentPtr, contentLen, hintPtr, hintLen, restPtr, restLen,
} from "../agenthost";

import { bytesEqual, manifest, errorResult, hintPtr, hintLen, QUEUE, INJECT } from "../agenthost";

// Calls that take AssemblyScript strings, which JavaScript cannot pass.
export function hintIs(which: i32): bool {
  return bytesEqual(hintPtr, hintLen, which == 0 ? "refine" : which == 1 ? "refin" : "stop");
}
export function testManifest(): u64 {
  return manifest("ex\"a\n", "1.0.0", 1 << QUEUE | 1 << INJECT);
}
export function testError(): u64 {
  return errorResult("bad config");
}
