package badgerdriver

import (
	"bytes"
	"hash/maphash"

	"github.com/dgraph-io/badger/v4"
)

// A commit of a new run and its input message must show that the run id and
// the message id are unused, and a step commit that each step's id is.
// Read from badger, each is a miss that searches
// every memtable and every level. The ids the host makes (store.NewID) grow
// with time, so the committer proves most new ids unused without a read
// (ADR 0152):
//
//   - floor: no id of the table in the store is above it. At open it is the
//     table's last key (one reverse seek); the committer, badger's only
//     writer (ADR 0145), keeps it true.
//   - above: the ids above floor that the committer has written (or tried
//     to: a transaction that failed leaves them, which only costs a read),
//     by a 64-bit hash: two ids of one hash only cost a read.
//
// An id above floor and not in above is unused. Any other id is read from
// badger, as before; so ids that do not grow (another client's, or a clock
// set back) are checked as before, only not faster. When above is full,
// floor rises to the largest id in it and above is emptied: the ids still
// on their way that are now below floor are read.

// idFloor proves ids of one table unused; it belongs to the committer's
// goroutine.
type idFloor struct {
	floor string              // no id of the table in the store is above it
	above map[uint64]struct{} // hashes of the ids above floor written since floor was set
	top   string              // the largest id in above
	max   int                 // bounds above
	seed  maphash.Seed
}

// maxAbove bounds an idFloor's set (idFloor.max).
const maxAbove = 1 << 15

func newIDFloor(floor string, max int) *idFloor {
	return &idFloor{floor: floor, above: make(map[uint64]struct{}, max), max: max, seed: maphash.MakeSeed()}
}

// unused reports whether id is surely not in the store nor written by an
// earlier member of the committer's transaction. false means it may be: the
// caller reads it.
func (f *idFloor) unused(id string) bool {
	if id <= f.floor {
		return false
	}
	if id > f.top {
		return true // above all of above
	}
	_, ok := f.above[maphash.String(f.seed, id)]
	return !ok
}

// add records that the committer writes id, before the write can be read.
func (f *idFloor) add(id string) {
	if id <= f.floor {
		return
	}
	if len(f.above) >= f.max {
		f.floor = f.top
		clear(f.above)
		if id <= f.floor {
			return
		}
	}
	f.above[maphash.String(f.seed, id)] = struct{}{}
	if id > f.top {
		f.top = id
	}
}

// lastID returns the largest id of table in db ("" when it has none): its
// last key, without the table byte.
func lastID(db *badger.DB, table byte) (string, error) {
	var last string
	err := db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Reverse = true
		opts.PrefetchValues = false
		it := txn.NewIterator(opts)
		defer it.Close()
		next := []byte{table + 1}
		// Reverse, Seek stops at the largest key at or before next; next
		// itself (a key of the following table with an empty id) is passed.
		for it.Seek(next); it.Valid() && bytes.Equal(it.Item().Key(), next); it.Next() {
		}
		if it.Valid() && it.Item().Key()[0] == table {
			last = string(it.Item().Key()[1:])
		}
		return nil
	})
	return last, err
}
