// Package jsonlite reads and writes JSON without reflection, for wasm guests:
// encoding/json (with reflect and fmt) more than doubles the size of a Go
// guest and with it the time the host takes to load it.
//
// Parse turns a document into plain values: map[string]any for objects, []any
// for arrays, string, float64, bool and nil. The Append functions write JSON
// values onto a byte slice.
package jsonlite
