package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/agenthost/agenthost/abi/driver"
	"github.com/agenthost/agenthost/abi/record"
)

// ErrNotSupported: the store driver cannot do what was asked (it does not
// implement the optional interface, e.g. driver.ThreadLister).
var ErrNotSupported = errors.New("not supported by the store driver")

// MaxThreadPage bounds ListThreads' limit.
const MaxThreadPage = 1000

// ListThreads returns up to limit threads whose id sorts after the cursor
// `after`, in id order, and the cursor of the next page: empty when there
// is none. A driver that cannot list its threads (no driver.ThreadLister)
// answers ErrNotSupported.
func (rt *Runtime) ListThreads(ctx context.Context, after string, limit int) ([]record.Thread, string, error) {
	tl, ok := rt.cfg.Driver.(driver.ThreadLister)
	if !ok {
		return nil, "", fmt.Errorf("%w: listing threads needs a driver that implements ThreadLister (protocol version 2)", ErrNotSupported)
	}
	if limit <= 0 || limit > MaxThreadPage {
		return nil, "", fmt.Errorf("%w: limit must be 1 to %d", ErrInvalid, MaxThreadPage)
	}
	// One more than asked tells whether a next page exists.
	ths, err := tl.ListThreads(ctx, after, limit+1)
	if err != nil {
		return nil, "", speak(err)
	}
	if len(ths) <= limit {
		return ths, "", nil
	}
	ths = ths[:limit]
	return ths, ths[limit-1].ID, nil
}
