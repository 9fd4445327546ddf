// Package rules holds the decision logic of the standard guests as plain Go,
// so that the guests, their native twins in benchmarks, and their tests share
// one definition. The C refine guest (guests/policy/refine-c) implements
// Refine byte for byte the same way.
package rules
