// Package host is the agenthost runtime: create one with New, submit inputs
// to threads with Submit, wait for their answers with Ticket.Wait, and stop
// it with Close.
//
// A Runtime is a coordinator and a pool of executors over a store layer
// (package host/store):
//
//   - The coordinator keeps at most one active run per thread, starts the
//     head of each thread's queue, runs many threads at once up to
//     Config.MaxConcurrentRuns, and at start-up takes a new host epoch and
//     recovers every run a previous process left behind.
//   - An executor runs one run: it projects the prompt, loops model steps
//     and tool calls through the prepareStep hook chain, and ends the run
//     with one terminal commit.
//   - The injection registry holds, in memory only, the inputs admitted with
//     inject, each offered to the run that was active when it was admitted.
//     At every step boundary the executor takes those whose runs are
//     next in line and puts them into its prompt; only when it completes does
//     its terminal commit absorb those runs. Losing the registry loses
//     nothing: each offer is also a durable queued run. When the input policy
//     cannot return inject, no registry exists and no boundary does any work.
//   - Tickets resolve through the store, the same way in-process and after a
//     restart: an absorbed run's ticket returns the answer of the run that
//     absorbed it.
package host
