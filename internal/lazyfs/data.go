package lazyfs

import "maps"

// chunkSize is the unit in which file contents are kept. A file is sparse:
// a chunk never written reads as zeros, so a file truncated to gigabytes
// (badger sizes its logs so, then maps them) costs only what is written.
const chunkSize = 64 << 10

type chunk = [chunkSize]byte

// contents is a file's bytes: its size and the chunks written. A synced
// copy shares its chunks with the file until either is written: a write
// copies a chunk it shares first (see writeAt).
type contents struct {
	size   int64
	chunks map[int64]*chunk
}

// clone returns a copy sharing every chunk.
func (c contents) clone() contents {
	return contents{size: c.size, chunks: maps.Clone(c.chunks)}
}

// own returns chunk i for writing: a chunk of its own, copied first when
// shared is the synced copy's (same pointer), zeros when absent.
func (c *contents) own(i int64, shared map[int64]*chunk) *chunk {
	ch := c.chunks[i]
	switch {
	case ch == nil:
		ch = new(chunk)
	case shared[i] == ch:
		cp := *ch
		ch = &cp
	default:
		return ch
	}
	if c.chunks == nil {
		c.chunks = map[int64]*chunk{}
	}
	c.chunks[i] = ch
	return ch
}

// writeAt writes p at off, growing the file as needed; shared are the
// chunks of the synced copy, never written in place.
func (c *contents) writeAt(p []byte, off int64, shared map[int64]*chunk) {
	end := off + int64(len(p))
	for len(p) > 0 {
		i, o := off/chunkSize, off%chunkSize
		n := copy(c.own(i, shared)[o:], p)
		p, off = p[n:], off+int64(n)
	}
	c.size = max(c.size, end)
}

// readAt reads into p from off, up to the end of the file, and returns
// the count read.
func (c *contents) readAt(p []byte, off int64) int {
	if off >= c.size {
		return 0
	}
	p = p[:min(int64(len(p)), c.size-off)]
	n := len(p)
	for len(p) > 0 {
		i, o := off/chunkSize, off%chunkSize
		var k int
		if ch := c.chunks[i]; ch != nil {
			k = copy(p, ch[o:])
		} else {
			k = min(len(p), chunkSize-int(o))
			clear(p[:k])
		}
		p, off = p[k:], off+int64(k)
	}
	return n
}

// zero writes zeros over [off, end), within the file's size, dropping
// whole chunks.
func (c *contents) zero(off, end int64, shared map[int64]*chunk) {
	end = min(end, c.size)
	for off < end {
		i, o := off/chunkSize, off%chunkSize
		k := min(end-off, chunkSize-o)
		if o == 0 && k == chunkSize {
			delete(c.chunks, i)
		} else if c.chunks[i] != nil {
			clear(c.own(i, shared)[o : o+k])
		}
		off += k
	}
}

// truncate sets the size; bytes past a shrunk end are gone, and read as
// zeros if the file grows again.
func (c *contents) truncate(size int64, shared map[int64]*chunk) {
	if size < c.size {
		c.zero(size, c.size, shared)
		for i := range c.chunks {
			if i*chunkSize >= size {
				delete(c.chunks, i)
			}
		}
	}
	c.size = size
}
