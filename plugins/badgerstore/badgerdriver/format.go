package badgerdriver

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/abi/driver"
)

// The stored form has a version, kept under formatKey (ADR 0158):
//
//	1  no format key: each run's step log has its last seq under its own
//	   key (n <run id>), written with every step
//	2  the format key; a run's last step seq is the seq of its log's last
//	   key, and no n key is left
//
// Open brings a directory of an older format to formatVersion before
// anything else reads it, and refuses one of a newer format: a build that
// does not know a format cannot tell what its keys mean.
const formatVersion = 2

// formatKey holds the directory's format version, be64.
var formatKey = []byte{tFormat}

// migrateBatch bounds the keys one transaction of a migration deletes.
var migrateBatch = 10_000 // a variable for the tests

// checkFormat reads the format of db, brings it to formatVersion, and
// writes the format key. A new database gets the key at once. The caller
// holds the directory's process lock; no commit runs yet.
func checkFormat(db *badger.DB, log hclog.Logger) error {
	v, err := readFormat(db)
	if err != nil {
		return err
	}
	switch {
	case v == formatVersion:
		return nil
	case v > formatVersion:
		return fmt.Errorf("%w: the data directory holds store format %d, newer than this badgerstore's %d: it was written by a newer version, and an older one cannot read it",
			driver.ErrInvalidArgument, v, formatVersion)
	}
	if v == 0 {
		empty, err := isEmpty(db)
		if err != nil {
			return err
		}
		if !empty {
			v = 1
		}
	}
	if v == 1 {
		n, err := dropStepLastKeys(db)
		if err != nil {
			return fmt.Errorf("migrating the data directory from store format 1 to 2: %w", err)
		}
		log.Info("migrated the data directory to store format 2", "last_seq_keys_removed", n)
	}
	// Written last: a migration cut short is run again at the next open.
	return db.Update(func(txn *badger.Txn) error {
		return txn.Set(formatKey, binary.BigEndian.AppendUint64(nil, formatVersion))
	})
}

// readFormat returns the format version db holds, 0 without a format key.
func readFormat(db *badger.DB) (uint64, error) {
	var v uint64
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(formatKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error {
			if len(b) != 8 || binary.BigEndian.Uint64(b) == 0 {
				return fmt.Errorf("%w: badgerstore: the format key holds %x, not a store format", driver.ErrInvalidArgument, b)
			}
			v = binary.BigEndian.Uint64(b)
			return nil
		})
	})
	return v, err
}

// isEmpty reports whether db holds no key.
func isEmpty(db *badger.DB) (bool, error) {
	empty := true
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		it.Rewind()
		empty = !it.Valid()
		return nil
	})
	return empty, err
}

// dropStepLastKeys deletes every n key of format 1, migrateBatch at a time,
// and returns how many it deleted. In format 2 the last seq of a run's
// step log is read from the log itself (lastStepSeq), which format 1
// always wrote with the same transaction as the key, so the two agree.
// Each batch's scan starts past the last key the one before deleted, so
// that it does not walk the earlier batches' deletions again.
func dropStepLastKeys(db *badger.DB) (int, error) {
	total := 0
	from := []byte{tStepLast}
	for {
		var keys [][]byte
		err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tStepLast}})
			defer it.Close()
			for it.Seek(from); it.Valid() && len(keys) < migrateBatch; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return total, err
		}
		err = db.Update(func(txn *badger.Txn) error {
			for _, k := range keys {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += len(keys)
		from = append(keys[len(keys)-1], 0) // the next key after it
	}
}
