// Exposes the SDK to test.mjs, which drives it from JavaScript.
export {
  allocRegion, parseRequest, decision,
  active, activeSteps, queued, metadataPairs, threadIdPtr, threadIdLen,
  contentPtr, contentLen, hintPtr, hintLen, restPtr, restLen,
  parseToolRequest, toolStep, toolPtr, toolLen, serverPtr, serverLen, argumentsPtr, argumentsLen,
  callIdPtr, callIdLen, idempotencyKeyPtr, idempotencyKeyLen, runIdPtr, runIdLen,
  toolThreadIdPtr, toolThreadIdLen,
} from "../agenthost";

import {
  bytesEqual, bytesContain, manifest, manifestHooks, errorResult, toolDecision, hintPtr, hintLen, toolPtr, toolLen,
  QUEUE, INJECT, ALLOW, DENY, ASK, HOOK_INPUT_POLICY, HOOK_TOOL_POLICY,
} from "../agenthost";

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
export function toolContains(which: i32): bool {
  return bytesContain(toolPtr, toolLen, which == 0 ? "delete" : which == 1 ? "fs_delete_x" : "x");
}
export function testManifestHooks(which: i32): u64 {
  return which == 0
    ? manifestHooks("t", "1", HOOK_TOOL_POLICY, 0)
    : manifestHooks("t", "1", HOOK_INPUT_POLICY | HOOK_TOOL_POLICY, 1 << QUEUE);
}
export function testToolDecision(which: i32): u64 {
  if (which == 0) return toolDecision(ALLOW, 3, "ignored");
  if (which == 1) return toolDecision(DENY, 2, "no, ¬ 要 😀");
  if (which == 2) return toolDecision(ASK, 40, "ok?");
  return toolDecision(ASK, 1, "é".repeat(600));
}
