package soak

// Metric reads one counter from a host's /metrics, for the benchmarks of
// package soak_test.
var Metric = metric
