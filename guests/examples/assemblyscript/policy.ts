// The example inputPolicy guest (guests/examples/README.md) in
// AssemblyScript, on the SDK in sdk/assemblyscript. Built by build.sh with
// the assemblyscript compiler pinned in package-lock.json.
import {
  QUEUE, INJECT, INTERRUPT, REJECT, OK,
  allocRegion, parseRequest, parseError, bytesEqual, decision, manifest,
  active, queued, contentLen, hintPtr, hintLen,
} from "../../../sdk/assemblyscript/agenthost";

export function agenthost_abi_version(): i32 {
  return 1;
}

export function agenthost_alloc(size: u32): usize {
  return allocRegion(size);
}

export function agenthost_manifest(): u64 {
  return manifest("example-assemblyscript", "1.0.0",
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
