// Package host is the agenthost runtime: create one with New, submit inputs
// to threads with Submit, wait for their answers with Ticket.Wait, and stop
// it with Close.
//
// A Runtime joins a few parts over a store layer (package host/store), each
// in a file of its own and each unaware of the others:
//
//   - The lease keeper (lease.go) says who this host is: every run it starts
//     or recovers is owned by its lease's epoch, and a thread by the epoch
//     that last started a run on it. The leases are the store's when the
//     driver has them (several hosts, fenced commits), else a table of this
//     process's (one host); the runtime asks both the same questions
//     (ADR 0122). At start-up a new lease makes every run a previous process
//     left active recoverable.
//   - The coordinator (coordinator.go) keeps at most one worker per thread,
//     runs many threads at once up to Config.MaxConcurrentRuns, and hands
//     each worker the thread it executes next.
//   - The ticket resolver (ticket.go) wakes the callers waiting for runs,
//     in this process and, by notice, on other hosts.
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
