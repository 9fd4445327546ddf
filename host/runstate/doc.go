// Package runstate is the run-state reducer of agenthost: a pure function
// from the records a mutation needs and the mutation to the records to write.
//
// Reduce does no I/O, starts no goroutine, reads no clock and draws no
// random number: ids and times arrive inside the mutation. The store layer
// (package host/store) loads a Snapshot from a driver, calls Reduce, and
// commits the resulting Effects in one conditional driver transaction,
// retrying on a version conflict. A test keeps I/O packages out of this
// package for good.
//
// The mutations are Admit, Start, CommitTerminal, Recover and Cancel. Their
// rules, in short:
//
//   - Admit: a repeated idempotency key returns the earlier admission and
//     writes nothing; the same key with other content is ErrKeyReused. On an
//     idle thread the input gets a new queued run and no policy is asked; on a
//     busy thread the caller's Decision applies: queue and inject write the
//     same records (a queued run, or with CoalescePending the input joins the
//     last queued run), interrupt also names the active run to stop, reject is
//     ErrBusy and writes nothing. With StartAs, the new run of an idle
//     thread is started in the same effects, under that owner.
//   - Start: the head of the queue becomes active, owned by the caller; never
//     two active runs on a thread.
//   - CommitTerminal: only the active run's owner may end it. Only a completed
//     run may absorb. Each absorb entry must name the next queued run with
//     exactly the inputs it holds; stale entries are dropped, never fatal.
//     Kept entries move their inputs into the completing run and end their
//     runs superseded/absorbed, pointing at it, with no assistant message.
//   - Recover: an active run whose owner is gone is queued again with
//     attempt+1, or fails once it has used its attempts.
//   - Cancel: an operator ends a queued or active run (interrupted/canceled).
//
// Prompt and History project a thread's records into what a model sees.
//
// docs/design.md#reducer states these rules in full, with the invariants
// (I1-I12) they keep and the scenarios (S1-S14) that test them.
package runstate
