package lazyfs

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestContents checks the sparse contents against a plain byte slice over
// random writes, truncations and hole punches, with a synced copy taken
// now and then that must never change under later writes.
func TestContents(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c contents
	var want []byte
	var synced contents
	var syncedWant []byte
	for step := range 600 {
		switch op := rng.IntN(10); {
		case op < 6:
			off := rng.Int64N(5 * chunkSize)
			p := make([]byte, rng.IntN(2*chunkSize))
			for i := range p {
				p[i] = byte(rng.IntN(255) + 1)
			}
			c.writeAt(p, off, synced.chunks)
			if end := off + int64(len(p)); end > int64(len(want)) {
				want = append(want, make([]byte, end-int64(len(want)))...)
			}
			copy(want[off:], p)
		case op < 8:
			size := rng.Int64N(6 * chunkSize)
			c.truncate(size, synced.chunks)
			if size < int64(len(want)) {
				want = want[:size]
			} else {
				want = append(want, make([]byte, size-int64(len(want)))...)
			}
		case op < 9:
			off := rng.Int64N(5 * chunkSize)
			end := off + rng.Int64N(3*chunkSize)
			c.zero(off, end, synced.chunks)
			for i := off; i < min(end, int64(len(want))); i++ {
				want[i] = 0
			}
		default:
			synced = c.clone()
			syncedWant = bytes.Clone(want)
		}
		if c.size != int64(len(want)) {
			t.Fatalf("step %d: size %d, want %d", step, c.size, len(want))
		}
		got := make([]byte, len(want)+100)
		n := c.readAt(got, 0)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("step %d: contents differ (read %d bytes, want %d)", step, n, len(want))
		}
		gotSynced := make([]byte, len(syncedWant))
		if n := synced.readAt(gotSynced, 0); n != len(syncedWant) || !bytes.Equal(gotSynced, syncedWant) {
			t.Fatalf("step %d: the synced copy changed under later writes", step)
		}
	}
}

// TestContentsSparse: a file truncated to gigabytes costs only the chunks
// written.
func TestContentsSparse(t *testing.T) {
	var c contents
	c.truncate(2<<30, nil)
	c.writeAt([]byte("end"), 2<<30-3, nil)
	if len(c.chunks) != 1 {
		t.Fatalf("%d chunks for one write into a 2 GiB file", len(c.chunks))
	}
	p := make([]byte, 10)
	for i := range p {
		p[i] = 9
	}
	if n := c.readAt(p, 1<<30); n != 10 || !bytes.Equal(p, make([]byte, 10)) {
		t.Fatalf("a hole reads %v (%d bytes), want zeros", p, n)
	}
	if n := c.readAt(p, 2<<30-3); n != 3 || string(p[:3]) != "end" {
		t.Fatalf("read %q at the end", p[:n])
	}
}
