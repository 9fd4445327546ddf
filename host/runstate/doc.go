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
// The mutations are Admit, Start, Take, Wait, Answer, CommitTerminal,
// Recover and Cancel.
// Their rules, in short:
//
//   - Admit: a repeated idempotency key returns the earlier admission and
//     writes nothing; the same key with other content is ErrKeyReused. On an
//     idle thread the input gets a new queued run and no policy is asked; on a
//     busy thread the caller's Decision applies: queue and inject write the
//     same records (a queued run, or with CoalescePending the input joins the
//     last queued run, unless the active run took that run's inputs or
//     the run was started before and queued again by recovery),
//     interrupt also names the active run to stop, reject is ErrBusy and
//     writes nothing. With StartAs, the new run of an idle thread is
//     started in the same effects, under that owner.
//   - Start: the head of the queue becomes active, owned by the caller; never
//     two active runs on a thread.
//   - Take: the active run's owner records, before the model sees them, the
//     inputs it takes at a step boundary: a contiguous prefix of the queue
//     behind the runs it took before, each run with exactly its inputs and
//     not taken by another; the taken runs get TakenBy and a take step record
//     is written with them. Invalid entries are refused, never fatal.
//   - Wait: the active run's owner, at its attempt, records the tool calls
//     the tool policy said ask for (StepAsk records, in the same commit)
//     and lists them in the run's Pending: the run waits, still active.
//   - Answer: anyone answers a call in an open run's Pending (a StepAnswer
//     record in the same commit); the call leaves Pending once decided
//     (reject, respond, edit, or its last needed approve). The same answer
//     again (same key, or the deciding answer) is the recorded one; another
//     answer to a decided call is ErrAnswered; a call not pending in an
//     open run is ErrNotWaiting; an unknown call ErrCallNotFound.
//   - CommitTerminal: only the active run's owner may end it. Only a completed
//     run may absorb. Each absorb entry must name the next queued run with
//     exactly the inputs it holds, not taken by another run, and, over a
//     store that keeps steps (Snapshot.StepsKept), taken by this run; stale
//     entries are dropped, never fatal. Kept entries move their inputs into the
//     completing run and end their runs superseded/absorbed, pointing at it,
//     with no assistant message; the run's TranscriptIDs keep where the model
//     saw them. Runs it took and did not absorb are released (TakenBy
//     cleared): every run it took, when it does not complete. A completed
//     run's commit may carry the answer's step record (Final), written with
//     it.
//   - Recover: an active run whose owner is gone is queued again with
//     attempt+1, keeping its takes, or fails once it has used its attempts,
//     releasing them; a waiting run (with NewOwner) stays active and waiting
//     under the new owner, attempt+1, whatever its attempts.
//   - Cancel: an operator ends a queued or active run (interrupted/canceled),
//     releasing what it took; a queued run whose inputs are taken is refused
//     (ErrTaken, naming the taker).
//
// Prompt and History project a thread's records into what a model sees.
//
// docs/design.md#reducer states these rules in full, with the invariants
// (I1-I12) they keep and the scenarios (S1-S14) that test them.
package runstate
