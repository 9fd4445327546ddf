// Package guest is the Go SDK for agenthost wasm guests: inputPolicy,
// prepareStep and toolPolicy extensions compiled with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o policy.wasm .
//
// A guest is a main package that calls Register from an init function; main
// itself is never run (the host calls the reactor's _initialize, which runs
// package initialisation only). The SDK provides every export of ABI v1
// (see abi/guestabi/SPEC.md): it owns the memory handoff, decodes requests,
// encodes results, turns returned errors and panics into guest errors the host
// reports, and passes the host's configuration blob to Guest.Init.
//
//	func init() {
//		guest.Register(guest.Guest{
//			Name:    "queue",
//			Actions: []string{guest.Queue},
//			InputPolicy: func(*guest.Request) (guest.Decision, error) {
//				return guest.Decision{Action: guest.Queue}, nil
//			},
//		})
//	}
//
//	func main() {}
//
// The package also builds on other platforms (without its exports), so guests
// can be unit-tested natively with Guest's functions.
package guest
