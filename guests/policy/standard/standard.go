// Package standard embeds the standard policy guests that the agenthost
// binary ships with, so a fresh install has a working sandboxed policy
// without a wasm toolchain. RefineC is the C build of the refine policy
// (guests/policy/refine-c); a test keeps this copy identical to it.
package standard

import _ "embed"

// RefineC is the refine input policy compiled from C: inject when the new
// input refines the running one, interrupt when it redirects or says stop,
// queue otherwise. Its configuration is {"coalescePending": true|false}.
//
//go:embed refine-c.wasm
var RefineC []byte
