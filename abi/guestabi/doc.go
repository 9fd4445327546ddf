// Package guestabi is version 1 of the contract between the agenthost host and
// a WebAssembly guest (an inputPolicy or prepareStep extension).
//
// SPEC.md in this directory is the normative description, written so that a
// guest can be implemented in any language that compiles to a core wasm
// module. This package holds what the Go host and the Go guest SDK share: the
// export and import names, the status and action codes, the binary layout of
// the inputPolicy request and decision (AppendPolicyRequest,
// DecodePolicyRequest, AppendDecision, DecodeDecision) and the JSON shapes of
// the manifest and of the prepareStep request and result.
//
// The package imports nothing of agenthost and holds no policy logic.
package guestabi
