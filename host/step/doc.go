// Package step defines the prepareStep hook: a function the executor calls at
// every step boundary to rewrite the next step's settings (system prompt,
// active tools, tool choice, model parameters) and add context to it.
//
// Native Go hooks and sandboxed wasm guests (host/wasm) implement the same
// Hook interface. The request and result types are those of the wasm guest
// ABI (abi/guestabi), so a hook sees the same data whichever way it is built.
package step
