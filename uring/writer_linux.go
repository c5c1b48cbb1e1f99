package uring

import (
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/mqstore/mqstore/internal/segfile"
)

// extent is a file range written from off-heap memory: mem[i] goes to file
// offset fileOff+i.
type extent struct {
	fileOff int64
	mem     []byte
}

// writeTarget says how an extent list is written.
type writeTarget struct {
	fd       int32
	bufIndex int    // registered buffer holding every extent's memory; -1 for plain WRITE
	rwFlags  uint32 // RWFDSync for O_DSYNC writes
	align    int64  // a short write resumes at a multiple of this (1, or the O_DIRECT block)
	// path, when set, names the file to the fault seam (segfile.Begin and
	// End around each request).
	path string
}

// inflightWrite is a piece of an extent the kernel is writing.
type inflightWrite struct {
	fileOff int64
	mem     []byte
	ticket  Ticket
	retries int // consecutive completions without progress
	op      segfile.Op
}

// maxNoProgress bounds rewrites of a piece whose short results made no
// aligned progress.
const maxNoProgress = 4

// writer writes extents through a ring with a bounded window of requests in
// flight and resubmits the rest of every short write. It owns preallocated
// scratch space, so a steady-state write does not allocate. Not safe for
// concurrent use: each segment's commit path owns one.
type writer struct {
	ring       *Ring
	depth      int
	chunkBytes int64
	reqs       []Request
	pieces     []inflightWrite
	tickets    []Ticket
	queue      []inflightWrite // FIFO window, oldest first

	// shortWrites counts short completions whose remainder was resubmitted.
	shortWrites int64
}

func newWriter(r *Ring, depth int, chunkBytes int64) *writer {
	depth = min(depth, int(r.SQEntries()))
	return &writer{
		ring:       r,
		depth:      depth,
		chunkBytes: chunkBytes,
		reqs:       make([]Request, depth),
		pieces:     make([]inflightWrite, depth),
		tickets:    make([]Ticket, depth),
		queue:      make([]inflightWrite, 0, depth),
	}
}

// write writes every extent in order, at most w.depth requests of at most
// w.chunkBytes in flight. It always waits for every request it submitted,
// even after an error or a cancelled ctx, because the kernel reads the
// memory until then. It returns the end of the written prefix: the file
// offset up to which every byte of the extents (taken in order) is written.
func (w *writer) write(ctx context.Context, t writeTarget, extents []extent) (prefixEnd int64, err error) {
	if len(extents) == 0 {
		return 0, nil
	}
	prefixEnd = extents[0].fileOff
	nextExtent, nextOff := 0, int64(0) // the next byte not yet submitted
	w.queue = w.queue[:0]
	for {
		if err == nil {
			if cerr := ctx.Err(); cerr != nil {
				err = fmt.Errorf("uring: write: %w", cerr)
			}
		}
		if err == nil {
			k := 0
			for len(w.queue)+k < w.depth && nextExtent < len(extents) {
				e := extents[nextExtent]
				n := min(w.chunkBytes, int64(len(e.mem))-nextOff)
				w.pieces[k] = inflightWrite{fileOff: e.fileOff + nextOff, mem: e.mem[nextOff : nextOff+n]}
				w.reqs[k] = t.request(w.pieces[k])
				k++
				if nextOff += n; nextOff == int64(len(e.mem)) {
					nextExtent, nextOff = nextExtent+1, 0
				}
			}
			if k > 0 {
				var submitted int
				submitted, err = w.submit(ctx, t, k)
				if submitted < k {
					// Build the pieces not submitted again later (or never,
					// after an error).
					nextExtent, nextOff = w.position(extents, w.pieces[submitted].fileOff)
				}
			}
		}
		if len(w.queue) == 0 {
			return prefixEnd, err
		}
		head := &w.queue[0]
		c := w.ring.waitKeep(head.ticket)
		done, rerr := w.complete(t, head, c, err == nil)
		if rerr != nil && err == nil {
			err = rerr
		}
		if done {
			w.ring.release(head.ticket)
			if head.op.Path != "" {
				segfile.End(head.op, rerr)
			}
			if err == nil {
				prefixEnd = head.fileOff + int64(len(head.mem))
			}
			w.queue = append(w.queue[:0], w.queue[1:]...)
		}
	}
}

// submit submits the first k built pieces, or a prefix of them. It blocks
// for slots only while the writer holds none: a writer that holds tickets
// and waits for more can deadlock with others doing the same, so holding
// some it takes what is free now, or nothing (and then waits for its own
// oldest request). Each piece is reported to the fault seam first; a piece
// the seam fails is not submitted, nor any after it.
func (w *writer) submit(ctx context.Context, t writeTarget, k int) (int, error) {
	tickets := w.tickets[:k]
	if len(w.queue) == 0 {
		if err := w.ring.acquire(ctx, tickets); err != nil {
			return 0, err
		}
	} else if !w.ring.tryAcquire(tickets) {
		return 0, nil
	}
	n := k
	var err error
	if t.path != "" {
		for i := range k {
			p := &w.pieces[i]
			p.op = segfile.Op{Kind: segfile.OpPwrite, Path: t.path, Offset: p.fileOff, Length: int64(len(p.mem)), Via: viaRing}
			if t.rwFlags&RWFDSync != 0 {
				p.op.Kind = segfile.OpWriteDurable
			}
			if berr := segfile.Begin(p.op); berr != nil {
				segfile.End(p.op, berr)
				err = fmt.Errorf("uring: write [%d,%d): %w", p.fileOff, p.fileOff+int64(len(p.mem)), berr)
				n = i
				break
			}
		}
	}
	for _, tk := range tickets[n:] {
		w.ring.release(tk)
	}
	if n == 0 {
		return 0, err
	}
	if perr := w.ring.push(w.reqs[:n], tickets[:n]); perr != nil {
		for i := range n {
			if w.pieces[i].op.Path != "" {
				segfile.End(w.pieces[i].op, perr)
			}
		}
		return 0, perr
	}
	for i := range n {
		w.pieces[i].ticket = tickets[i]
		w.queue = append(w.queue, w.pieces[i])
	}
	return n, err
}

// position returns the extent index and offset in it of the byte that goes
// to file offset fileOff.
func (w *writer) position(extents []extent, fileOff int64) (int, int64) {
	for i, e := range extents {
		if fileOff >= e.fileOff && fileOff < e.fileOff+int64(len(e.mem)) {
			return i, fileOff - e.fileOff
		}
	}
	return len(extents), 0
}

// complete handles the completion of the oldest piece, whose slot is still
// held. It returns done when the piece needs nothing more (written, failed,
// or abandoned after an earlier error; the caller then releases the slot);
// otherwise it resubmitted the remainder on the same slot.
func (w *writer) complete(t writeTarget, p *inflightWrite, c Completion, resubmit bool) (done bool, err error) {
	if c.Res < 0 {
		return true, fmt.Errorf("uring: write [%d,%d): %w", p.fileOff, p.fileOff+int64(len(p.mem)), c.Err())
	}
	written := int64(c.Res)
	if written >= int64(len(p.mem)) {
		return true, nil
	}
	if !resubmit {
		return true, nil
	}
	// A short write: resume at the last aligned byte written (O_DIRECT
	// needs aligned offsets; the block is rewritten whole, and no other
	// request in flight touches it).
	advance := written - written%t.align
	if advance == 0 {
		if p.retries++; p.retries > maxNoProgress {
			return true, fmt.Errorf("uring: write [%d,%d): %d short writes without progress: %w",
				p.fileOff, p.fileOff+int64(len(p.mem)), p.retries, io.ErrShortWrite)
		}
	} else {
		p.retries = 0
	}
	p.fileOff += advance
	p.mem = p.mem[advance:]
	w.shortWrites++
	// The rest goes out on the piece's own slot (still held): no new slot
	// is waited for while others are held.
	w.reqs[0] = t.request(*p)
	w.tickets[0] = p.ticket
	if err := w.ring.resubmit(w.reqs[:1], w.tickets[:1]); err != nil {
		return true, fmt.Errorf("uring: resubmit the rest of a short write at %d: %w", p.fileOff, err)
	}
	return false, nil
}

// request builds the SQE for a piece.
func (t writeTarget) request(p inflightWrite) Request {
	q := Request{
		Opcode:  OpWrite,
		Fd:      t.fd,
		Offset:  uint64(p.fileOff),
		Addr:    uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p.mem)))),
		Len:     uint32(len(p.mem)),
		OpFlags: t.rwFlags,
	}
	if t.bufIndex >= 0 {
		q.Opcode = OpWriteFixed
		q.BufIndex = uint16(t.bufIndex)
	}
	return q
}
