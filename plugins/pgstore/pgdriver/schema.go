package pgdriver

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agenthost/agenthost/abi/driver"
)

// A migration is one version of the schema: SQL run in one transaction,
// with {{s}} standing for the schema's quoted name.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the schema's versions, in order. A released migration is
// never edited: a change is a new one.
var migrations = []migration{
	{1, "threads, runs, messages, idempotency, leases; commit_batch, renew_lease", migration1},
	{2, "commit_batch_try, for several batches in one transaction", migration2},
	{3, "steps; runs.owner, runs.attempt; commit_batch3, commit_steps (store protocol 2)", migration3},
	{4, "commit_group, the batches of a group in one statement", migration4},
}

// SchemaVersion is the schema version this driver migrates to.
var SchemaVersion = migrations[len(migrations)-1].version

// migration4 adds commit_group: the batches of a group (CommitMany) of
// distinct threads in one statement, with no subtransaction. The checks of
// commit_batch3 (version, fence, history, steps) are reads, made for every
// batch first: a batch that fails one is refused and writes nothing. The
// batches that pass are then written together, one statement per table
// for the whole group. A write that fails (a unique violation: a duplicate
// idempotency key, message, step, or a run of another thread) raises, and
// the whole transaction rolls back: the driver then sends the group again
// as commit_batch3_try calls, each in a subtransaction, which tell the
// batches apart. A batch's rows in the flat arrays carry the batch's
// ordinal (1-based) in the matching *_batch array.
const migration4 = `
CREATE FUNCTION {{s}}.commit_group(
	p_thread text[], p_expected bigint[], p_version bigint[], p_fence bigint[], p_owner bigint[],
	p_commit_id text[], p_header bytea[], p_first_seq bigint[], p_last_seq bigint[],
	p_open_batch int[], p_open_ids text[],
	p_run_batch int[], p_run_ids text[], p_run_states text[], p_run_seqs bigint[], p_runs bytea[],
	p_run_owners text[], p_run_attempts bigint[],
	p_msg_batch int[], p_msg_seqs bigint[], p_msg_ids text[], p_msgs bytea[],
	p_key_batch int[], p_keys text[], p_key_payloads bytea[],
	p_step_batch int[], p_step_runs text[], p_step_seqs bigint[], p_step_ids text[], p_steps bytea[],
	OUT o_states text[], OUT o_messages text[]
) LANGUAGE plpgsql AS $fn$
DECLARE
	v_nb      int := coalesce(cardinality(p_thread), 0);
	v_ok      boolean[];
	v_ver     bigint[];
	v_own     bigint[];
	v_last    bigint[];
	v_live    bigint[];
	v_steps   text[];   -- per batch: why its steps do not start at the next seq, or null
	v_expires timestamptz;
	v_cnt     bigint;
	v_i       int;
	v_rec     record;
BEGIN
	o_states := array_fill(NULL::text, ARRAY[v_nb]);
	o_messages := array_fill(NULL::text, ARRAY[v_nb]);
	v_steps := array_fill(NULL::text, ARRAY[v_nb]);
	IF (SELECT count(DISTINCT x.id) FROM unnest(p_thread) AS x(id)) <> v_nb THEN
		RAISE EXCEPTION USING ERRCODE = 'AH400', MESSAGE = 'commit_group: a thread appears twice in the group';
	END IF;

	-- The threads' rows, locked in id order (as a group of commit_batch3
	-- calls locks them) until the transaction ends; then read (READ
	-- COMMITTED: a snapshot per statement, after the commits before).
	PERFORM 1 FROM {{s}}.threads t WHERE t.id = ANY(p_thread) ORDER BY t.id FOR UPDATE;
	SELECT array_agg(coalesce(t.version, 0) ORDER BY x.n), array_agg(coalesce(t.owner, 0) ORDER BY x.n),
			array_agg(coalesce(t.last_seq, 0) ORDER BY x.n)
		INTO v_ver, v_own, v_last
		FROM unnest(p_thread) WITH ORDINALITY AS x(id, n) LEFT JOIN {{s}}.threads t ON t.id = x.id;
	-- The fences' leases live now, by the database's clock after the wait
	-- for the rows above (clock_timestamp(), not now()).
	SELECT coalesce(array_agg(l.epoch), '{}') INTO v_live FROM {{s}}.leases l
		WHERE l.epoch = ANY(p_fence) AND l.expires_at > clock_timestamp();
	-- Each run's steps start at the next seq of its log.
	IF coalesce(cardinality(p_step_runs), 0) > 0 THEN
		FOR v_rec IN
			SELECT f.b, f.run, f.seq, coalesce((SELECT max(st.seq) FROM {{s}}.steps st WHERE st.run_id = f.run), 0) AS last
			FROM (SELECT DISTINCT ON (x.b, x.run) x.b, x.run, x.seq
				FROM unnest(p_step_batch, p_step_runs, p_step_seqs) WITH ORDINALITY AS x(b, run, seq, n)
				ORDER BY x.b, x.run, x.n) f
		LOOP
			IF v_rec.seq <> v_rec.last + 1 AND v_steps[v_rec.b] IS NULL THEN
				v_steps[v_rec.b] := format('step seq %s of run %s is not the next (%s)', v_rec.seq, v_rec.run, v_rec.last + 1);
			END IF;
		END LOOP;
	END IF;

	-- The checks of each batch, in commit_batch3's order; a new thread's
	-- row is written here, so that a concurrent first commit refuses it.
	FOR v_i IN 1..v_nb LOOP
		IF v_ver[v_i] <> p_expected[v_i] THEN
			o_states[v_i] := 'AH409';
			o_messages[v_i] := format('thread %s is at version %s, the batch expects %s', p_thread[v_i], v_ver[v_i], p_expected[v_i]);
		ELSIF p_fence[v_i] = 0 AND p_owner[v_i] <> v_own[v_i] THEN
			o_states[v_i] := 'AH403';
			o_messages[v_i] := format('an unfenced commit may not change the owner of thread %s (%s to %s)', p_thread[v_i], v_own[v_i], p_owner[v_i]);
		ELSIF p_fence[v_i] <> 0 AND NOT p_fence[v_i] = ANY(v_live) THEN
			o_states[v_i] := 'AH403';
			o_messages[v_i] := format('lease %s is not live', p_fence[v_i]);
		ELSE
			IF p_fence[v_i] <> 0 AND v_own[v_i] <> 0 AND v_own[v_i] <> p_fence[v_i] THEN
				-- Taking the thread over from another lease, which must be
				-- dead: its row is locked and read again (see commit_batch3).
				SELECT l.expires_at INTO v_expires FROM {{s}}.leases l WHERE l.epoch = v_own[v_i] FOR SHARE;
				IF FOUND AND v_expires > clock_timestamp() THEN
					o_states[v_i] := 'AH403';
					o_messages[v_i] := format('thread %s is owned by live lease %s', p_thread[v_i], v_own[v_i]);
				END IF;
			END IF;
			IF o_states[v_i] IS NOT NULL THEN
				NULL;
			ELSIF p_first_seq[v_i] > 0 AND p_first_seq[v_i] <= v_last[v_i] THEN
				o_states[v_i] := 'AH400';
				o_messages[v_i] := format('message seq %s of thread %s is not after the history (at seq %s)', p_first_seq[v_i], p_thread[v_i], v_last[v_i]);
			ELSIF v_steps[v_i] IS NOT NULL THEN
				o_states[v_i] := 'AH409';
				o_messages[v_i] := v_steps[v_i];
			ELSIF p_expected[v_i] = 0 THEN
				INSERT INTO {{s}}.threads (id, version, owner, last_commit_id, last_seq, open_run_ids, committed_at, payload)
					VALUES (p_thread[v_i], p_version[v_i], p_owner[v_i], p_commit_id[v_i], greatest(p_last_seq[v_i], 0),
						(SELECT coalesce(array_agg(o.id ORDER BY o.n), '{}') FROM unnest(p_open_batch, p_open_ids) WITH ORDINALITY AS o(b, id, n) WHERE o.b = v_i),
						clock_timestamp(), p_header[v_i])
					ON CONFLICT (id) DO NOTHING;
				IF NOT FOUND THEN
					o_states[v_i] := 'AH409';
					o_messages[v_i] := format('thread %s was first written by a concurrent commit', p_thread[v_i]);
				END IF;
			END IF;
		END IF;
	END LOOP;
	v_ok := ARRAY(SELECT x.s IS NULL FROM unnest(o_states) WITH ORDINALITY AS x(s, n) ORDER BY x.n);

	-- The writes of the batches that passed, one statement per table.
	WITH o AS (
		SELECT y.b, array_agg(y.id ORDER BY y.n) AS ids
		FROM unnest(p_open_batch, p_open_ids) WITH ORDINALITY AS y(b, id, n) GROUP BY y.b
	)
	UPDATE {{s}}.threads t SET version = x.version, owner = x.owner, last_commit_id = x.commit_id,
			last_seq = greatest(t.last_seq, x.last_seq), open_run_ids = coalesce(o.ids, '{}'),
			committed_at = clock_timestamp(), payload = x.header
		FROM unnest(p_thread, p_expected, p_version, p_owner, p_commit_id, p_last_seq, p_header)
			WITH ORDINALITY AS x(id, expected, version, owner, commit_id, last_seq, header, n)
			LEFT JOIN o ON o.b = x.n
		WHERE t.id = x.id AND x.expected <> 0 AND v_ok[x.n];
	IF coalesce(cardinality(p_keys), 0) > 0 THEN
		INSERT INTO {{s}}.idempotency (thread_id, key, payload)
			SELECT p_thread[k.b], k.key, k.payload FROM unnest(p_key_batch, p_keys, p_key_payloads) AS k(b, key, payload)
			WHERE v_ok[k.b];
	END IF;
	IF coalesce(cardinality(p_msg_ids), 0) > 0 THEN
		INSERT INTO {{s}}.messages (thread_id, seq, id, payload)
			SELECT p_thread[m.b], m.seq, m.id, m.payload FROM unnest(p_msg_batch, p_msg_seqs, p_msg_ids, p_msgs) AS m(b, seq, id, payload)
			WHERE v_ok[m.b];
	END IF;
	IF coalesce(cardinality(p_run_ids), 0) > 0 THEN
		INSERT INTO {{s}}.runs AS r (id, thread_id, state, seq, payload, owner, attempt)
			SELECT x.id, p_thread[x.b], x.state, x.seq, x.payload, x.owner, x.attempt
				FROM unnest(p_run_batch, p_run_ids, p_run_states, p_run_seqs, p_runs, p_run_owners, p_run_attempts)
					AS x(b, id, state, seq, payload, owner, attempt)
				WHERE v_ok[x.b]
			ON CONFLICT (id) DO UPDATE SET state = excluded.state, seq = excluded.seq, payload = excluded.payload,
					owner = excluded.owner, attempt = excluded.attempt
				WHERE r.thread_id = excluded.thread_id;
		GET DIAGNOSTICS v_cnt = ROW_COUNT;
		IF v_cnt <> (SELECT count(*) FROM unnest(p_run_batch) AS x(b) WHERE v_ok[x.b]) THEN
			RAISE EXCEPTION USING ERRCODE = 'AH400', MESSAGE = 'a run of the group belongs to another thread than its batch''s';
		END IF;
	END IF;
	IF coalesce(cardinality(p_step_ids), 0) > 0 THEN
		INSERT INTO {{s}}.steps (run_id, seq, id, thread_id, payload)
			SELECT x.run, x.seq, x.id, p_thread[x.b], x.payload
				FROM unnest(p_step_batch, p_step_runs, p_step_seqs, p_step_ids, p_steps) AS x(b, run, seq, id, payload)
				WHERE v_ok[x.b];
	END IF;
END
$fn$;
`

// migration3 is store protocol 2: the steps table (driver.StepStore), the
// runs' owner and attempt as columns (CommitSteps checks them), and
// commit_batch3, commit_batch with both. commit_batch, which a driver of
// schema version 2 still running against the upgraded schema calls, becomes
// commit_batch3 with an empty owner and attempt 0 for its runs and no
// steps: a run written by such a driver never passes CommitSteps' check
// until a driver of this version writes it again (a recovered run is, with
// its new attempt, before it runs). The same holds for the runs of a
// database upgraded in place, whose columns start empty.
const migration3 = `
ALTER TABLE {{s}}.runs ADD COLUMN owner text NOT NULL DEFAULT '',
	ADD COLUMN attempt bigint NOT NULL DEFAULT 0;

CREATE TABLE {{s}}.steps (
	run_id    text COLLATE "C" NOT NULL,
	seq       bigint NOT NULL,
	id        text COLLATE "C" NOT NULL,
	thread_id text COLLATE "C" NOT NULL,
	payload   bytea NOT NULL,                     -- storepb.Step
	CONSTRAINT steps_pkey PRIMARY KEY (run_id, seq),  -- ReadSteps pages by it; the next-seq rule's backstop
	CONSTRAINT steps_id_key UNIQUE (id)
);

CREATE FUNCTION {{s}}.commit_batch3(
	p_thread text, p_expected bigint, p_version bigint, p_fence bigint, p_owner bigint,
	p_commit_id text, p_open text[], p_header bytea, p_first_seq bigint, p_last_seq bigint,
	p_run_ids text[], p_run_states text[], p_run_seqs bigint[], p_runs bytea[],
	p_msg_seqs bigint[], p_msg_ids text[], p_msgs bytea[],
	p_keys text[], p_key_payloads bytea[],
	p_run_owners text[], p_run_attempts bigint[],
	p_step_runs text[], p_step_seqs bigint[], p_step_ids text[], p_steps bytea[]
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
	v_version  bigint := 0;
	v_owner    bigint := 0;
	v_last_seq bigint := 0;
	v_expires  timestamptz;
	v_n        bigint;
	v_run      text;
	v_first    bigint;
	v_last     bigint;
BEGIN
	-- The thread's row, locked until the transaction ends: the commits of a
	-- thread are serialized, and each statement below (READ COMMITTED: a
	-- snapshot per statement) reads after the commit before this one.
	SELECT t.version, t.owner, t.last_seq INTO v_version, v_owner, v_last_seq
		FROM {{s}}.threads t WHERE t.id = p_thread FOR UPDATE;
	IF NOT FOUND THEN
		v_version := 0; v_owner := 0; v_last_seq := 0;
	END IF;

	-- 1. The version, first: a stale version is a conflict whatever the fence.
	IF v_version <> p_expected THEN
		RAISE EXCEPTION USING ERRCODE = 'AH409',
			MESSAGE = format('thread %s is at version %s, the batch expects %s', p_thread, v_version, p_expected);
	END IF;

	-- 2. The fence, by the database's clock now: clock_timestamp(), not
	-- now(), which is when the transaction began (before any wait for the
	-- row lock above).
	IF p_fence = 0 THEN
		IF p_owner <> v_owner THEN
			RAISE EXCEPTION USING ERRCODE = 'AH403',
				MESSAGE = format('an unfenced commit may not change the owner of thread %s (%s to %s)', p_thread, v_owner, p_owner);
		END IF;
	ELSE
		IF NOT EXISTS (SELECT 1 FROM {{s}}.leases l WHERE l.epoch = p_fence AND l.expires_at > clock_timestamp()) THEN
			RAISE EXCEPTION USING ERRCODE = 'AH403', MESSAGE = format('lease %s is not live', p_fence);
		END IF;
		IF v_owner <> 0 AND v_owner <> p_fence THEN
			-- Taking the thread over from another lease, which must be dead.
			-- Its row is locked and read again, so that a renewal in flight
			-- (renew_lease locks it too) cannot bring it back after this
			-- commit found it dead.
			SELECT l.expires_at INTO v_expires FROM {{s}}.leases l WHERE l.epoch = v_owner FOR SHARE;
			IF FOUND AND v_expires > clock_timestamp() THEN
				RAISE EXCEPTION USING ERRCODE = 'AH403',
					MESSAGE = format('thread %s is owned by live lease %s', p_thread, v_owner);
			END IF;
		END IF;
	END IF;

	-- 3. History only grows at its end.
	IF p_first_seq > 0 AND p_first_seq <= v_last_seq THEN
		RAISE EXCEPTION USING ERRCODE = 'AH400',
			MESSAGE = format('message seq %s of thread %s is not after the history (at seq %s)', p_first_seq, p_thread, v_last_seq);
	END IF;

	-- 4. Each run's steps start at the next seq of its log (the steps of a
	-- run are consecutive in the batch: the driver checked). Two commits
	-- that both find the same next seq collide on steps_pkey: a conflict.
	FOR v_run, v_first IN
		SELECT DISTINCT ON (x.run) x.run, x.seq FROM unnest(p_step_runs, p_step_seqs) WITH ORDINALITY AS x(run, seq, n)
		ORDER BY x.run, x.n
	LOOP
		SELECT coalesce(max(st.seq), 0) INTO v_last FROM {{s}}.steps st WHERE st.run_id = v_run;
		IF v_first <> v_last + 1 THEN
			RAISE EXCEPTION USING ERRCODE = 'AH409',
				MESSAGE = format('step seq %s of run %s is not the next (%s)', v_first, v_run, v_last + 1);
		END IF;
	END LOOP;

	-- The writes.
	IF p_expected = 0 THEN
		INSERT INTO {{s}}.threads (id, version, owner, last_commit_id, last_seq, open_run_ids, committed_at, payload)
			VALUES (p_thread, p_version, p_owner, p_commit_id, greatest(p_last_seq, 0), p_open, clock_timestamp(), p_header)
			ON CONFLICT (id) DO NOTHING;
		IF NOT FOUND THEN
			RAISE EXCEPTION USING ERRCODE = 'AH409',
				MESSAGE = format('thread %s was first written by a concurrent commit', p_thread);
		END IF;
	ELSE
		UPDATE {{s}}.threads t SET version = p_version, owner = p_owner, last_commit_id = p_commit_id,
				last_seq = greatest(t.last_seq, p_last_seq), open_run_ids = p_open,
				committed_at = clock_timestamp(), payload = p_header
			WHERE t.id = p_thread;
	END IF;
	INSERT INTO {{s}}.idempotency (thread_id, key, payload)
		SELECT p_thread, k.key, k.payload FROM unnest(p_keys, p_key_payloads) AS k(key, payload);
	INSERT INTO {{s}}.messages (thread_id, seq, id, payload)
		SELECT p_thread, m.seq, m.id, m.payload FROM unnest(p_msg_seqs, p_msg_ids, p_msgs) AS m(seq, id, payload);
	INSERT INTO {{s}}.runs AS r (id, thread_id, state, seq, payload, owner, attempt)
		SELECT x.id, p_thread, x.state, x.seq, x.payload, x.owner, x.attempt
			FROM unnest(p_run_ids, p_run_states, p_run_seqs, p_runs, p_run_owners, p_run_attempts) AS x(id, state, seq, payload, owner, attempt)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, seq = excluded.seq, payload = excluded.payload,
				owner = excluded.owner, attempt = excluded.attempt
			WHERE r.thread_id = excluded.thread_id;
	GET DIAGNOSTICS v_n = ROW_COUNT;
	IF v_n <> coalesce(cardinality(p_run_ids), 0) THEN
		RAISE EXCEPTION USING ERRCODE = 'AH400',
			MESSAGE = format('a run of the batch belongs to another thread than %s', p_thread);
	END IF;
	INSERT INTO {{s}}.steps (run_id, seq, id, thread_id, payload)
		SELECT x.run, x.seq, x.id, p_thread, x.payload
			FROM unnest(p_step_runs, p_step_seqs, p_step_ids, p_steps) AS x(run, seq, id, payload);
END
$fn$;

CREATE OR REPLACE FUNCTION {{s}}.commit_batch(
	p_thread text, p_expected bigint, p_version bigint, p_fence bigint, p_owner bigint,
	p_commit_id text, p_open text[], p_header bytea, p_first_seq bigint, p_last_seq bigint,
	p_run_ids text[], p_run_states text[], p_run_seqs bigint[], p_runs bytea[],
	p_msg_seqs bigint[], p_msg_ids text[], p_msgs bytea[],
	p_keys text[], p_key_payloads bytea[]
) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM {{s}}.commit_batch3(p_thread, p_expected, p_version, p_fence, p_owner,
		p_commit_id, p_open, p_header, p_first_seq, p_last_seq,
		p_run_ids, p_run_states, p_run_seqs, p_runs,
		p_msg_seqs, p_msg_ids, p_msgs, p_keys, p_key_payloads,
		array_fill(''::text, ARRAY[coalesce(cardinality(p_run_ids), 0)]),
		array_fill(0::bigint, ARRAY[coalesce(cardinality(p_run_ids), 0)]),
		'{}'::text[], '{}'::bigint[], '{}'::text[], '{}'::bytea[]);
END
$fn$;

CREATE FUNCTION {{s}}.commit_batch3_try(
	p_thread text, p_expected bigint, p_version bigint, p_fence bigint, p_owner bigint,
	p_commit_id text, p_open text[], p_header bytea, p_first_seq bigint, p_last_seq bigint,
	p_run_ids text[], p_run_states text[], p_run_seqs bigint[], p_runs bytea[],
	p_msg_seqs bigint[], p_msg_ids text[], p_msgs bytea[],
	p_keys text[], p_key_payloads bytea[],
	p_run_owners text[], p_run_attempts bigint[],
	p_step_runs text[], p_step_seqs bigint[], p_step_ids text[], p_steps bytea[],
	OUT o_state text, OUT o_constraint text, OUT o_message text, OUT o_detail text
) LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM {{s}}.commit_batch3(p_thread, p_expected, p_version, p_fence, p_owner,
		p_commit_id, p_open, p_header, p_first_seq, p_last_seq,
		p_run_ids, p_run_states, p_run_seqs, p_runs,
		p_msg_seqs, p_msg_ids, p_msgs, p_keys, p_key_payloads,
		p_run_owners, p_run_attempts, p_step_runs, p_step_seqs, p_step_ids, p_steps);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS o_state = RETURNED_SQLSTATE, o_constraint = CONSTRAINT_NAME,
		o_message = MESSAGE_TEXT, o_detail = PG_EXCEPTION_DETAIL;
END
$fn$;

-- commit_steps is one CommitSteps: the checks of driver.StepStore, then the
-- writes, or a refusal that writes nothing: AH409 (the run is not active
-- with this owner and attempt, or the steps do not start at the next seq),
-- AH403 (the fence: the lease is not live or does not own the thread),
-- AH400. The thread's row is not written: its version does not move. The
-- run's row (and the thread's, when fenced) is locked shared until the
-- transaction ends, so that a commit that changes the run (or takes the
-- thread over) waits for it, and it for that commit.
CREATE FUNCTION {{s}}.commit_steps(
	p_thread text, p_run text, p_owner text, p_attempt bigint, p_fence bigint,
	p_seqs bigint[], p_ids text[], p_steps bytea[]
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
	v_thread  text;
	v_state   text;
	v_owner   text;
	v_attempt bigint;
	v_towner  bigint;
	v_last    bigint;
BEGIN
	-- The thread's row first, as commit_batch3 locks it (then the runs'),
	-- so that the two never wait for each other in a cycle.
	IF p_fence <> 0 THEN
		IF NOT EXISTS (SELECT 1 FROM {{s}}.leases l WHERE l.epoch = p_fence AND l.expires_at > clock_timestamp()) THEN
			RAISE EXCEPTION USING ERRCODE = 'AH403', MESSAGE = format('lease %s is not live', p_fence);
		END IF;
		SELECT t.owner INTO v_towner FROM {{s}}.threads t WHERE t.id = p_thread FOR SHARE;
		IF NOT FOUND OR v_towner <> p_fence THEN
			RAISE EXCEPTION USING ERRCODE = 'AH403',
				MESSAGE = format('thread %s is owned by lease %s, not %s', p_thread, coalesce(v_towner, 0), p_fence);
		END IF;
	END IF;
	SELECT r.thread_id, r.state, r.owner, r.attempt INTO v_thread, v_state, v_owner, v_attempt
		FROM {{s}}.runs r WHERE r.id = p_run FOR SHARE;
	IF NOT FOUND THEN
		RAISE EXCEPTION USING ERRCODE = 'AH409', MESSAGE = format('run %s does not exist', p_run);
	END IF;
	IF v_thread <> p_thread THEN
		RAISE EXCEPTION USING ERRCODE = 'AH400',
			MESSAGE = format('run %s belongs to thread %s, not %s', p_run, v_thread, p_thread);
	END IF;
	IF v_state <> 'active' OR v_owner <> p_owner OR v_attempt <> p_attempt THEN
		RAISE EXCEPTION USING ERRCODE = 'AH409',
			MESSAGE = format('run %s is %s, owner %L, attempt %s; the steps are for an active run of owner %L, attempt %s',
				p_run, v_state, v_owner, v_attempt, p_owner, p_attempt);
	END IF;
	SELECT coalesce(max(st.seq), 0) INTO v_last FROM {{s}}.steps st WHERE st.run_id = p_run;
	IF p_seqs[1] <> v_last + 1 THEN
		RAISE EXCEPTION USING ERRCODE = 'AH409',
			MESSAGE = format('step seq %s of run %s is not the next (%s)', p_seqs[1], p_run, v_last + 1);
	END IF;
	INSERT INTO {{s}}.steps (run_id, seq, id, thread_id, payload)
		SELECT p_run, x.seq, x.id, p_thread, x.payload FROM unnest(p_seqs, p_ids, p_steps) AS x(seq, id, payload);
END
$fn$;

-- commit_steps_try is commit_steps in a subtransaction, reporting a refusal
-- instead of raising it, so that the step commits of many runs share one
-- transaction, each applied or refused on its own.
CREATE FUNCTION {{s}}.commit_steps_try(
	p_thread text, p_run text, p_owner text, p_attempt bigint, p_fence bigint,
	p_seqs bigint[], p_ids text[], p_steps bytea[],
	OUT o_state text, OUT o_constraint text, OUT o_message text, OUT o_detail text
) LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM {{s}}.commit_steps(p_thread, p_run, p_owner, p_attempt, p_fence, p_seqs, p_ids, p_steps);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS o_state = RETURNED_SQLSTATE, o_constraint = CONSTRAINT_NAME,
		o_message = MESSAGE_TEXT, o_detail = PG_EXCEPTION_DETAIL;
END
$fn$;
`

// migration2 adds commit_batch_try: commit_batch in a subtransaction
// (a plpgsql block with an exception handler), which reports a refusal
// instead of raising it, so that several batches can share one transaction
// (CommitMany), each applied or refused on its own.
const migration2 = `
CREATE FUNCTION {{s}}.commit_batch_try(
	p_thread text, p_expected bigint, p_version bigint, p_fence bigint, p_owner bigint,
	p_commit_id text, p_open text[], p_header bytea, p_first_seq bigint, p_last_seq bigint,
	p_run_ids text[], p_run_states text[], p_run_seqs bigint[], p_runs bytea[],
	p_msg_seqs bigint[], p_msg_ids text[], p_msgs bytea[],
	p_keys text[], p_key_payloads bytea[],
	OUT o_state text, OUT o_constraint text, OUT o_message text, OUT o_detail text
) LANGUAGE plpgsql AS $fn$
BEGIN
	PERFORM {{s}}.commit_batch(p_thread, p_expected, p_version, p_fence, p_owner,
		p_commit_id, p_open, p_header, p_first_seq, p_last_seq,
		p_run_ids, p_run_states, p_run_seqs, p_runs,
		p_msg_seqs, p_msg_ids, p_msgs, p_keys, p_key_payloads);
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS o_state = RETURNED_SQLSTATE, o_constraint = CONSTRAINT_NAME,
		o_message = MESSAGE_TEXT, o_detail = PG_EXCEPTION_DETAIL;
END
$fn$;
`

const migration1 = `
CREATE TABLE {{s}}.threads (
	id             text COLLATE "C" PRIMARY KEY,
	version        bigint NOT NULL,
	owner          bigint NOT NULL DEFAULT 0,     -- the lease epoch that owns the thread, 0: none
	last_commit_id text NOT NULL,
	last_seq       bigint NOT NULL DEFAULT 0,     -- the history's last message seq
	open_run_ids   text[] COLLATE "C" NOT NULL DEFAULT '{}',
	committed_at   timestamptz NOT NULL,          -- the database's time of the last commit
	payload        bytea NOT NULL                 -- storepb.Thread
);

CREATE TABLE {{s}}.runs (
	id        text COLLATE "C" PRIMARY KEY,
	thread_id text COLLATE "C" NOT NULL,
	state     text NOT NULL,
	seq       bigint NOT NULL,
	payload   bytea NOT NULL                      -- storepb.Run
);
-- ListRuns(state, after, limit): one index range scan.
CREATE INDEX runs_state_id ON {{s}}.runs (state, id);

CREATE TABLE {{s}}.messages (
	thread_id text COLLATE "C" NOT NULL,
	seq       bigint NOT NULL,
	id        text COLLATE "C" NOT NULL,
	payload   bytea NOT NULL,                     -- storepb.Message
	CONSTRAINT messages_pkey PRIMARY KEY (thread_id, seq),  -- ReadHistory pages by it
	CONSTRAINT messages_id_key UNIQUE (id)
);

-- The primary key is the idempotency check: a second record of a key is a
-- unique violation, and the commit that carries it fails whole.
CREATE TABLE {{s}}.idempotency (
	thread_id text COLLATE "C" NOT NULL,
	key       text COLLATE "C" NOT NULL,
	payload   bytea NOT NULL,                     -- storepb.Idempotency
	CONSTRAINT idempotency_pkey PRIMARY KEY (thread_id, key)
);

-- Leases (driver.Leaser), by the database's clock. Epochs come from the
-- sequence: unique, increasing, never reused.
CREATE SEQUENCE {{s}}.lease_epochs;
CREATE TABLE {{s}}.leases (
	epoch       bigint PRIMARY KEY,
	holder      text NOT NULL,
	acquired_at timestamptz NOT NULL,
	renewed_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,             -- dead from then on
	released    boolean NOT NULL DEFAULT false
);

-- commit_batch is one commit: the checks of driver.Driver.Commit and
-- driver.Leaser, then the writes, in the caller's transaction (the implicit
-- transaction of one statement). A refusal raises an error, so that nothing
-- of the batch is written: AH409 version conflict, AH403 fenced, AH400
-- invalid argument.
CREATE FUNCTION {{s}}.commit_batch(
	p_thread text, p_expected bigint, p_version bigint, p_fence bigint, p_owner bigint,
	p_commit_id text, p_open text[], p_header bytea, p_first_seq bigint, p_last_seq bigint,
	p_run_ids text[], p_run_states text[], p_run_seqs bigint[], p_runs bytea[],
	p_msg_seqs bigint[], p_msg_ids text[], p_msgs bytea[],
	p_keys text[], p_key_payloads bytea[]
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
	v_version  bigint := 0;
	v_owner    bigint := 0;
	v_last_seq bigint := 0;
	v_expires  timestamptz;
	v_n        bigint;
BEGIN
	-- The thread's row, locked until the transaction ends: the commits of a
	-- thread are serialized, and each statement below (READ COMMITTED: a
	-- snapshot per statement) reads after the commit before this one.
	SELECT t.version, t.owner, t.last_seq INTO v_version, v_owner, v_last_seq
		FROM {{s}}.threads t WHERE t.id = p_thread FOR UPDATE;
	IF NOT FOUND THEN
		v_version := 0; v_owner := 0; v_last_seq := 0;
	END IF;

	-- 1. The version, first: a stale version is a conflict whatever the fence.
	IF v_version <> p_expected THEN
		RAISE EXCEPTION USING ERRCODE = 'AH409',
			MESSAGE = format('thread %s is at version %s, the batch expects %s', p_thread, v_version, p_expected);
	END IF;

	-- 2. The fence, by the database's clock now: clock_timestamp(), not
	-- now(), which is when the transaction began (before any wait for the
	-- row lock above).
	IF p_fence = 0 THEN
		IF p_owner <> v_owner THEN
			RAISE EXCEPTION USING ERRCODE = 'AH403',
				MESSAGE = format('an unfenced commit may not change the owner of thread %s (%s to %s)', p_thread, v_owner, p_owner);
		END IF;
	ELSE
		IF NOT EXISTS (SELECT 1 FROM {{s}}.leases l WHERE l.epoch = p_fence AND l.expires_at > clock_timestamp()) THEN
			RAISE EXCEPTION USING ERRCODE = 'AH403', MESSAGE = format('lease %s is not live', p_fence);
		END IF;
		IF v_owner <> 0 AND v_owner <> p_fence THEN
			-- Taking the thread over from another lease, which must be dead.
			-- Its row is locked and read again, so that a renewal in flight
			-- (renew_lease locks it too) cannot bring it back after this
			-- commit found it dead.
			SELECT l.expires_at INTO v_expires FROM {{s}}.leases l WHERE l.epoch = v_owner FOR SHARE;
			IF FOUND AND v_expires > clock_timestamp() THEN
				RAISE EXCEPTION USING ERRCODE = 'AH403',
					MESSAGE = format('thread %s is owned by live lease %s', p_thread, v_owner);
			END IF;
		END IF;
	END IF;

	-- 3. History only grows at its end.
	IF p_first_seq > 0 AND p_first_seq <= v_last_seq THEN
		RAISE EXCEPTION USING ERRCODE = 'AH400',
			MESSAGE = format('message seq %s of thread %s is not after the history (at seq %s)', p_first_seq, p_thread, v_last_seq);
	END IF;

	-- The writes.
	IF p_expected = 0 THEN
		INSERT INTO {{s}}.threads (id, version, owner, last_commit_id, last_seq, open_run_ids, committed_at, payload)
			VALUES (p_thread, p_version, p_owner, p_commit_id, greatest(p_last_seq, 0), p_open, clock_timestamp(), p_header)
			ON CONFLICT (id) DO NOTHING;
		IF NOT FOUND THEN
			RAISE EXCEPTION USING ERRCODE = 'AH409',
				MESSAGE = format('thread %s was first written by a concurrent commit', p_thread);
		END IF;
	ELSE
		UPDATE {{s}}.threads t SET version = p_version, owner = p_owner, last_commit_id = p_commit_id,
				last_seq = greatest(t.last_seq, p_last_seq), open_run_ids = p_open,
				committed_at = clock_timestamp(), payload = p_header
			WHERE t.id = p_thread;
	END IF;
	INSERT INTO {{s}}.idempotency (thread_id, key, payload)
		SELECT p_thread, k.key, k.payload FROM unnest(p_keys, p_key_payloads) AS k(key, payload);
	INSERT INTO {{s}}.messages (thread_id, seq, id, payload)
		SELECT p_thread, m.seq, m.id, m.payload FROM unnest(p_msg_seqs, p_msg_ids, p_msgs) AS m(seq, id, payload);
	INSERT INTO {{s}}.runs AS r (id, thread_id, state, seq, payload)
		SELECT x.id, p_thread, x.state, x.seq, x.payload
			FROM unnest(p_run_ids, p_run_states, p_run_seqs, p_runs) AS x(id, state, seq, payload)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, seq = excluded.seq, payload = excluded.payload
			WHERE r.thread_id = excluded.thread_id;
	GET DIAGNOSTICS v_n = ROW_COUNT;
	IF v_n <> coalesce(cardinality(p_run_ids), 0) THEN
		RAISE EXCEPTION USING ERRCODE = 'AH400',
			MESSAGE = format('a run of the batch belongs to another thread than %s', p_thread);
	END IF;
END
$fn$;

-- renew_lease extends a live lease to ttl from now, or raises AH403. The
-- lease's row is locked before the clock is read, so that a renewal is
-- ordered after any commit that found the lease dead (see commit_batch).
CREATE FUNCTION {{s}}.renew_lease(p_epoch bigint, p_ttl_us bigint,
	OUT o_holder text, OUT o_expires timestamptz, OUT o_now timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
	v_released boolean;
	v_expires  timestamptz;
BEGIN
	SELECT l.holder, l.released, l.expires_at INTO o_holder, v_released, v_expires
		FROM {{s}}.leases l WHERE l.epoch = p_epoch FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION USING ERRCODE = 'AH403', MESSAGE = format('lease %s does not exist', p_epoch);
	END IF;
	o_now := clock_timestamp();
	IF v_released OR v_expires <= o_now THEN
		RAISE EXCEPTION USING ERRCODE = 'AH403', MESSAGE = format('lease %s is not live (it expired or was released)', p_epoch);
	END IF;
	o_expires := o_now + p_ttl_us * interval '1 microsecond';
	UPDATE {{s}}.leases l SET renewed_at = o_now, expires_at = o_expires WHERE l.epoch = p_epoch;
END
$fn$;
`

// migrateLockKey is the key of the transaction-scoped advisory lock that
// serializes migrations of schema across hosts.
func migrateLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("agenthost/pgstore/migrate/" + schema))
	return int64(h.Sum64())
}

// appliedVersion returns the highest applied migration of the schema, 0
// when the schema or its table does not exist.
func appliedVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, s string) (int, error) {
	var v int
	err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+s+".schema_migrations").Scan(&v)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000") { // undefined table, invalid schema name
		return 0, nil
	}
	return v, err
}

// migrate brings schema up to SchemaVersion. Each migration runs in its own
// transaction, which first takes the schema's transaction-scoped advisory
// lock (released with the transaction, also when the connection drops) and
// then looks again whether another host applied it meanwhile.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrateTo(ctx, pool, schema, migrations)
}

// migrateTo applies migrations ms (a prefix of migrations).
func migrateTo(ctx context.Context, pool *pgxpool.Pool, schema string, ms []migration) error {
	target := ms[len(ms)-1].version
	s := pgx.Identifier{schema}.Sanitize()
	v, err := appliedVersion(ctx, pool, s)
	if err != nil {
		return err
	}
	if v > target {
		return fmt.Errorf("%w: pgstore: schema %s is at version %d, newer than this driver's %d: use a newer driver", driver.ErrInvalidArgument, schema, v, target)
	}
	if v == target {
		return nil
	}
	key := migrateLockKey(schema)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+s+"; "+
			"CREATE TABLE IF NOT EXISTS "+s+".schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())")
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: creating schema %s: %w", schema, err)
	}
	for _, m := range ms {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
				return err
			}
			v, err := appliedVersion(ctx, tx, s)
			if err != nil || v >= m.version {
				return err
			}
			if v != m.version-1 {
				return fmt.Errorf("schema %s is at version %d, migration %d follows %d", schema, v, m.version, m.version-1)
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, "{{s}}", s)); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO "+s+".schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgstore: migrating schema %s to version %d (%s): %w", schema, m.version, m.name, err)
		}
	}
	return nil
}
