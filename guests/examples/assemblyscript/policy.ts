// The example inputPolicy and toolPolicy guest (guests/examples/README.md) in
// AssemblyScript, on the SDK in sdk/assemblyscript. Built by build.sh with
// the assemblyscript compiler pinned in package-lock.json.
import {
  QUEUE, INJECT, INTERRUPT, REJECT, OK, ALLOW, DENY, ASK, HOOK_INPUT_POLICY, HOOK_TOOL_POLICY,
  allocRegion, parseRequest, parseToolRequest, parseError, bytesEqual, bytesContain,
  decision, toolDecision, manifestHooks,
  active, queued, contentLen, hintPtr, hintLen, toolPtr, toolLen,
} from "../../../sdk/assemblyscript/agenthost";

export function agenthost_abi_version(): i32 {
  return 1;
}

export function agenthost_alloc(size: u32): usize {
  return allocRegion(size);
}

export function agenthost_manifest(): u64 {
  return manifestHooks("example-assemblyscript", "1.0.0", HOOK_INPUT_POLICY | HOOK_TOOL_POLICY,
    1 << QUEUE | 1 << INJECT | 1 << INTERRUPT | 1 << REJECT);
}

export function agenthost_input_policy(ptr: usize, len: u32): u64 {
  const err = parseRequest(ptr, len);
  if (err != OK) return parseError(err);
  if (bytesEqual(hintPtr, hintLen, "stop")) return decision(INTERRUPT, false);
  if (active && bytesEqual(hintPtr, hintLen, "refine")) return decision(INJECT, false);
  if (contentLen == 0) return decision(REJECT, false);
  return decision(QUEUE, queued > 0);
}

// The tool policy: deny shell_exec, ask one person before a tool whose name
// contains "delete" runs, allow the rest.
export function agenthost_tool_policy(ptr: usize, len: u32): u64 {
  const err = parseToolRequest(ptr, len);
  if (err != OK) return parseError(err);
  if (bytesEqual(toolPtr, toolLen, "shell_exec")) return toolDecision(DENY, 0, "shell_exec is not allowed");
  if (bytesContain(toolPtr, toolLen, "delete")) return toolDecision(ASK, 1, "Approve this deletion?");
  return toolDecision(ALLOW, 0, "");
}
