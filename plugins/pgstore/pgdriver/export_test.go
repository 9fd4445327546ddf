package pgdriver

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agenthost/agenthost/abi/driver"
)

// MigrateTo brings schema up to migration version v only: a database as a
// driver of that schema version left it.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, schema string, v int) error {
	return migrateTo(ctx, pool, schema, migrations[:v])
}

// CommitV2 commits b as a driver of schema version 2 does: one call of
// commit_batch, with no steps and no run owners or attempts.
func CommitV2(ctx context.Context, pool *pgxpool.Pool, schema string, b driver.Batch) error {
	a, err := prepare(b, nil)
	if err != nil {
		return err
	}
	s := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(ctx, "SELECT "+s+".commit_batch("+params(19)+")", a.threadID, a.expected, a.version, a.fence, a.owner,
		a.commitID, a.openRunIDs, a.header, a.firstSeq, a.lastSeq,
		a.runIDs, a.runStates, a.runSeqs, a.runs,
		a.msgSeqs, a.msgIDs, a.msgs,
		a.keys, a.keyPayloads)
	return mapError(err)
}

// EpochChannelPrefix is epochChannelPrefix, for tests of the channels'
// names.
var EpochChannelPrefix = epochChannelPrefix

// MapError is mapError, for tests of the mapping.
var MapError = mapError
