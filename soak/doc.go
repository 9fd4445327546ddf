// Package soak drives agenthost from the outside: a load generator that
// submits inputs over HTTP as real clients do (many threads, refine and
// redirect hints, idempotency keys, retries with the same key after errors
// and timeouts), and a soak that runs `agenthost serve` on badgerstore under
// that load, kills the server and its driver subprocess with SIGKILL at
// random moments, restarts it on the same data, sends bad requests and slow
// clients alongside, and at the end checks over HTTP that nothing accepted
// was lost (docs/soak.md). One seed drives every choice; a failure prints
// it to replay the soak.
package soak
