// Package mappedfile is the seam between mqstore's engine and its I/O backends.
//
// A MappedFile is one fixed-size segment file written append-only: a CommitLog
// segment, a ConsumeQueue file or an IndexFile. Every backend (mmap, transient,
// uring, uring-direct) implements it; the engine sees nothing else.
//
// The package is a leaf: it imports the standard library only. Besides the
// interface it holds the sentinel errors, the bookkeeping every backend's
// file embeds (Base: positions, sticky error, reference count), the
// registration a backend gives the engine (Registration, Registry), and an
// in-memory file system whose Crash keeps only flushed bytes (MemFS). The
// conformance suite every backend runs lives in the sub-package conformance;
// the fault-injecting wrapper the engine's tests use, in faultfile.
//
// Positions are byte offsets inside the segment (0 … SizeBytes). Three of them
// only ever move forward while a file is open:
//
//	wrote ≥ committed ≥ flushed
//
// wrote is where the next Append goes; committed is how far the bytes have been
// handed to the file (equal to wrote for write-through backends such as mmap);
// flushed is how far they are durable. Readable is backend specific (wrote for
// mmap, committed for buffered backends) and never exceeds wrote.
package mappedfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// PageSize is the unit of the least-pages rule (RocketMQ's OS_PAGE_SIZE).
const PageSize = 4096

// Sentinel errors; test with errors.Is. Backends wrap them with context.
var (
	// ErrFull: the append does not fit in the space left in the segment.
	ErrFull = errors.New("mappedfile: segment full")
	// ErrClosed: the file was closed or deleted.
	ErrClosed = errors.New("mappedfile: file closed")
	// ErrOutOfRange: a position or length outside the segment or its readable part.
	ErrOutOfRange = errors.New("mappedfile: position out of range")
	// ErrSizeMismatch: an existing file does not have the size it was opened with.
	ErrSizeMismatch = errors.New("mappedfile: file size differs from the segment size")
	// ErrInvalidArgument: a bad argument (negative size, misaligned offset, …).
	ErrInvalidArgument = errors.New("mappedfile: invalid argument")
	// ErrUnsupported: the backend cannot run here (no io_uring, no O_DIRECT, …).
	ErrUnsupported = errors.New("mappedfile: unsupported on this system")
	// ErrNoSpace: the file system has no room for a new segment (its
	// preallocation or its prewrite); wrapped with the errno (ENOSPC).
	ErrNoSpace = errors.New("mappedfile: no space left on the device")
)

// Encoder writes a record in place. EncodeAt must fill dst completely;
// filePos is the position of dst[0] inside the segment. It must not retain dst.
// If it returns an error nothing is published and the write position does not move.
type Encoder interface {
	EncodeAt(dst []byte, filePos int64) error
}

// Bytes is an Encoder that copies itself; handy for tests and for small
// fixed records (the 8-byte BLANK, ConsumeQueue units).
type Bytes []byte

// EncodeAt implements Encoder.
func (b Bytes) EncodeAt(dst []byte, _ int64) error {
	if len(dst) != len(b) {
		return errors.New("mappedfile: Bytes encoder: reserved length differs from the data length")
	}
	copy(dst, b)
	return nil
}

// ZeroDirty zeros dst, writing only the chunks that are not zero already:
// an encoder that must fill a range with zeros (mappedfile.Encoder fills
// every byte; a staging ring holds older bytes) leaves a fresh mapping's
// pages clean instead of dirtying every one for writeback.
func ZeroDirty(dst []byte) {
	for len(dst) > 0 {
		n := min(len(dst), len(zeroChunk))
		if !bytes.Equal(dst[:n], zeroChunk[:n]) {
			clear(dst[:n])
		}
		dst = dst[n:]
	}
}

// zeroChunk is what ZeroDirty compares dst with, a chunk at a time.
var zeroChunk [64 << 10]byte

// WarmOptions says how to warm a segment before it is written.
type WarmOptions struct {
	// Touch writes a zero to every page so later appends do not fault
	// (RocketMQ's warmMappedFile). Only for a segment with nothing written.
	Touch bool
	// FlushEveryPages, when > 0 and Touch is set, flushes every that many
	// touched pages so the warm-up does not pile up dirty pages.
	FlushEveryPages int
	// Lock mlocks the segment's memory.
	Lock bool
	// Advise applies madvise(WILLNEED, SEQUENTIAL) where the backend maps memory.
	Advise bool
}

// Spec names one segment file.
type Spec struct {
	// Path of the file. Open creates it when it does not exist.
	Path string
	// FromOffset is the global offset of the segment's first byte (its name).
	FromOffset int64
	// SizeBytes is the fixed size of the segment.
	SizeBytes int64
	// Prewrite asks Open, when it creates the file, to write every byte of
	// it (zeros) and sync it before the rename that makes it visible, so
	// the file's extents are written rather than allocated-but-unwritten: a
	// later write and fdatasync into it then commits only the data, not an
	// extent conversion in the file system's journal (ext4, xfs). It has no
	// effect on a file that exists (a file created with it stays written:
	// Truncate never turns written extents back into unwritten ones), and
	// none for backends that keep files in memory. The engine's allocation
	// service sets it (Options.PrewriteSegments), so the cost lands there.
	Prewrite bool
	// PrewritePace, with Prewrite, asks Open to write the zeros in steps,
	// each made durable (fdatasync) before the next is written, for as long
	// as PrewritePace returns true; then the rest at full speed. A device
	// with a volatile write cache then holds at most a step of zeros that
	// a concurrent sync of the log must flush along with its own data:
	// written at full speed, a 64 MiB segment's zeros made the log's syncs
	// beside them wait up to 30–60 ms on the reference machine
	// (docs/backends.md, "Paced zeros"). The allocation service sets it
	// (with engine.Options.PacePrewrite) for a segment it makes ahead of
	// need, returning false once a roll waits for that segment; nil writes
	// at full speed.
	PrewritePace func() bool
	// RecycleFrom names a file of SizeBytes bytes that an older segment
	// left (the engine's pool of segments retention retired), to take
	// instead of creating one when Path does not exist: Open renames it to
	// Path, syncs the directory and opens it as a new, empty segment (every
	// position 0), though its bytes past the write position are the old
	// segment's, not zeros. Its extents are written already, so Prewrite
	// has nothing to do. When the file is gone Open creates Path as usual.
	RecycleFrom string
	// Prewrote, when set, is called once by an Open that created the file
	// with Prewrite, with how the zeros were written (a backend that keeps
	// its files in memory writes none and never calls it).
	Prewrote func(Zeros)
	// HugePages asks a backend that maps the file to back the mapping with
	// transparent huge pages where the kernel can (madvise MADV_HUGEPAGE):
	// pages faulted in then come as 2 MiB folios, one fault and one TLB
	// entry where there were 512, and writeback writes them in large runs.
	// For a file written in bulk, in order, and synced seldom — an async
	// CommitLog segment. Not for one synced after every small append (a
	// sync then writes the whole dirty 2 MiB folio around the appended
	// bytes), nor for one written at random (each write into a clean huge
	// folio dirties all of it, which writeback throttling then charges). A hint: it changes no byte and no guarantee, pages already in
	// the cache (a pre-written segment's) keep their size, and backends that
	// do not map files ignore it.
	HugePages bool
	// RandomAccess says the file is read and written at random places (an
	// IndexFile's hash slots and the chains through its entries): a
	// backend that maps it advises MADV_RANDOM, so a page fault reads in
	// and allocates the one small page it needs, with no read-around.
	// Without it ext4 on Linux 6.18 grows the folios of a mapping faulted
	// in address order up to 2 MiB (large-folio readahead): a write then
	// dirties all of its folio — what HugePages says to avoid for random
	// writes — and a new folio is zeroed whole at once, on a virtual
	// machine that hands free memory back to its host from memory the
	// host has to fault in again. A hint: it changes no byte and no
	// guarantee, and backends that do not map files ignore it.
	RandomAccess bool
	// SmallFolios asks a backend that maps the file to keep the pages its
	// appends fault in small while the file is being written: for a file
	// Open creates with unwritten extents (not Prewrite, not RecycleFrom)
	// mmapio advises the mapping MADV_RANDOM, and takes the advice back
	// once the file is full, so that reads of a finished file get
	// readahead again. For a file synced after small appends (a sync
	// flush's CommitLog segment): without it ext4 on Linux 6.18 grows the
	// folios that appends fault in, in order, into unwritten extents up to
	// 2 MiB (large-folio readahead), and each sync then writes back every
	// whole folio an append dirtied — the cost HugePages says to avoid for
	// such a file. Faults into written extents read them, and the kernel
	// made small folios there anyway. A hint: it changes no byte and no
	// guarantee, and backends that do not map files ignore it.
	SmallFolios bool
	// WriteAhead asks a backend that maps the file to fault in writable,
	// after each Flush, the pages the next appends will write: a Flush's
	// msync write-protects every page it writes back (the kernel tracks
	// dirtiness through the page tables), and each append into such a page
	// — the last, partly written one — or into a page not yet mapped then
	// takes a write fault of its own, under the caller's append lock. For a
	// file synced after small appends (a sync flush's CommitLog segment).
	// mmapio faults them in with one madvise(MADV_POPULATE_WRITE) per
	// Flush. A hint: it changes no byte (the pages ahead are zeros, and
	// dirtied as they are) and no guarantee; backends that do not map
	// files ignore it.
	WriteAhead bool
}

// MemoryReads is implemented by a backend whose reads of recent bytes come
// from its own memory and of older ones from the device: with O_DIRECT the
// page cache holds none of what was written, so a read past the backend's
// memory is a device read. MemoryReadBytes is how far behind a segment's
// write position reads are still served from memory (0: no such bound —
// the page cache serves them). The engine keeps its dispatch within it
// (Options.DispatchLagLimitBytes).
type MemoryReads interface {
	MemoryReadBytes() int64
}

// Backend opens segment files of one kind.
//
// Open creates Path (preallocated to SizeBytes — and with Spec.Prewrite
// written with zeros — under a temporary name, synced and renamed, so a
// crash never leaves a half-created segment) when it does not exist; the new
// file's positions are all 0. When Path exists, its size must
// equal SizeBytes (else ErrSizeMismatch), and wrote, committed and flushed all
// start at SizeBytes, as if the file were full and durable: recovery reads it
// and then calls Truncate with the end of the valid data.
type Backend interface {
	Name() string
	Open(ctx context.Context, spec Spec) (MappedFile, error)
}

// MappedFile is one fixed-size, append-only segment. Append is called by one
// goroutine at a time (the owner holds the append lock); Commit by one
// goroutine at a time (the commit service) and Flush by one goroutine at a
// time (the flusher) — a Commit and a Flush may run at once, and a Flush
// then covers what was committed when it began; reads from any number of
// goroutines concurrently with all of them. (The conformance suite's
// CommitAndFlushConcurrently checks it.)
type MappedFile interface {
	// Path is the file's path.
	Path() string
	// FromOffset is the global offset of the first byte.
	FromOffset() int64
	// SizeBytes is the segment size.
	SizeBytes() int64

	WrotePosition() int64
	CommittedPosition() int64
	FlushedPosition() int64
	// ReadablePosition is how far reads may go; ≤ WrotePosition.
	ReadablePosition() int64

	// Append reserves n bytes at the write position, lets enc encode into
	// them in place, then publishes them. It returns the position of the first
	// byte. ErrFull when n > SizeBytes − WrotePosition; nothing is written then.
	Append(n int, enc Encoder) (filePos int64, err error)
	// Commit moves written bytes toward the file (a no-op for mmap, a pwrite for
	// the transient pool, io_uring writes for uring) and returns the committed
	// position. With leastPages > 0 it does nothing unless at least that many
	// pages are pending (wrote/PageSize − committed/PageSize ≥ leastPages) or
	// the segment is full.
	Commit(ctx context.Context, leastPages int) (committed int64, err error)
	// Flush makes committed bytes durable and returns the flushed position,
	// with the same least-pages rule against the flushed position.
	Flush(ctx context.Context, leastPages int) (flushed int64, err error)

	// ReadAt copies readable bytes at filePos into dst. Like io.ReaderAt it
	// returns io.EOF with n < len(dst) when it reaches the readable position.
	ReadAt(dst []byte, filePos int64) (n int, err error)
	// SendRange writes the readable bytes [filePos, filePos+n) to w: with
	// sendfile(2) when w is a socket and the bytes are in the file, by a copy
	// from memory otherwise. It never sends bytes past the readable position
	// (ErrOutOfRange).
	SendRange(ctx context.Context, w io.Writer, filePos, n int64) (sent int64, err error)

	// Retain takes a reference that keeps the memory and file open; false when
	// the file is already closing. Every successful Retain needs one Release.
	Retain() bool
	Release()

	// Truncate sets wrote, committed and flushed to validEnd (recovery decides
	// where valid data ends) and durably zeroes [validEnd, SizeBytes) so a later
	// scan cannot see old bytes there, without turning written extents back
	// into unwritten ones (a prewritten segment stays prewritten). The file
	// must not be in use.
	Truncate(ctx context.Context, validEnd int64) error

	// Close releases the file's resources once the last reference is released;
	// it does not flush. Later calls return ErrClosed.
	Close() error
	// Delete closes the file and removes it from its directory at once; the
	// memory stays valid for readers holding a reference until they release it.
	Delete() error

	// Err returns the sticky error: after the first failed write, commit or
	// flush, every later Append, Commit and Flush returns it (fsync is never
	// retried: after a failure the state of the data on disk is unknown).
	Err() error
}

// EndSetter is implemented by a MappedFile that can take recovery's end
// without zeroing the bytes past it: SetEnd is Truncate without the zeroing
// and its sync. It is for a file whose bytes past validEnd are known to hold
// nothing a later scan could take for a record of this file (after a clean
// close that flushed exactly to validEnd: zeros, or a reused file's old
// records, which carry another segment's offsets). The file must not be in
// use. A file without it is truncated.
type EndSetter interface {
	SetEnd(ctx context.Context, validEnd int64) error
}

// Overwriter is implemented by files that can rewrite bytes already
// appended (mmap, mem): the IndexFile appends its entries but updates its
// header and hash slots in place. The range must lie below WrotePosition.
// A later Flush makes overwritten bytes durable too, even those below the
// flushed position (the file tracks the lowest overwritten byte), and Flush
// with nothing appended still flushes pending overwrites.
//
// SwapEach is WriteAt for many fields of width bytes, in order, that first
// copies the bytes each replaces: field i, at filePos[i], is copied into
// old[i*width:] and p[i*width:(i+1)*width] written over it, so a later
// field at the same position hands back what an earlier one wrote
// (len(p) == len(old) == width*len(filePos)). Every position is checked
// before anything is written. The IndexFile swaps its hash slots' heads for
// their new entries with it: one call for a batch of random slots lets the
// CPU fetch their lines together, where a call per slot waits for each
// miss in turn behind the call's atomics.
type Overwriter interface {
	WriteAt(p []byte, filePos int64) (n int, err error)
	SwapEach(p, old []byte, width int, filePos []int64) error
}

// CheckSwapEach checks SwapEach's arguments against a file written up to
// wrote and returns the lowest position (wrote when there is none): the
// shared validation of every Overwriter.
func CheckSwapEach(path string, p, old []byte, width int, filePos []int64, wrote int64) (int64, error) {
	if width <= 0 || len(p) != width*len(filePos) || len(old) != len(p) {
		return 0, fmt.Errorf("%s: swap %d fields of %d bytes from %d bytes into %d: %w", path, len(filePos), width, len(p), len(old), ErrInvalidArgument)
	}
	low := wrote
	for _, pos := range filePos {
		if pos < 0 || int64(width) > wrote-pos {
			return 0, fmt.Errorf("%s: overwrite [%d,+%d), written up to %d: %w", path, pos, width, wrote, ErrOutOfRange)
		}
		low = min(low, pos)
	}
	return low, nil
}

// Lister is implemented by backends whose files do not live in the OS file
// system (MemFS). The engine lists and removes segments through it when present.
type Lister interface {
	// List returns the base names of the files in dir, sorted.
	List(dir string) ([]string, error)
	// Remove removes a file that is not open.
	Remove(path string) error
}

// LockReporter is implemented by a backend that mlocks memory: the bytes
// it holds locked now (warmed segments, buffer pools).
type LockReporter interface {
	LockedBytes() int64
}

// DirLister is implemented by a Lister whose files sit in directories of
// their own (the ConsumeQueues' topic/queue tree).
type DirLister interface {
	// ListDirs returns the base names of the directories directly in dir
	// that hold files (at any depth), sorted.
	ListDirs(dir string) ([]string, error)
}

// AbleTo reports RocketMQ's least-pages rule: whether the bytes between from
// and to (positions in a segment of sizeBytes) are enough to act on.
// A full segment always qualifies when anything is pending.
func AbleTo(from, to, sizeBytes int64, leastPages int) bool {
	if to <= from {
		return false
	}
	if to == sizeBytes {
		return true
	}
	if leastPages > 0 {
		return to/PageSize-from/PageSize >= int64(leastPages)
	}
	return true
}

// CheckRead validates a read of n bytes at filePos against the readable position.
// It returns how many bytes may be read and io.EOF when that is fewer than n.
func CheckRead(filePos int64, n int, readable int64) (int, error) {
	if filePos < 0 || n < 0 {
		return 0, ErrOutOfRange
	}
	if filePos >= readable {
		if n == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if end := filePos + int64(n); end > readable {
		return int(readable - filePos), io.EOF
	}
	return n, nil
}

// Warmer is implemented by segments whose memory can be prepared before it
// is written (a mapping to pre-fault, mlock or advise); a backend without
// such memory leaves it out. Callers find it by type assertion, through
// Warm and Cool.
type Warmer interface {
	// Warm prepares the segment's memory for writing (see WarmOptions).
	Warm(ctx context.Context, opts WarmOptions) error
	// Cool undoes Warm: munlock and madvise(DONTNEED) where that applies.
	Cool() error
}

// Warm warms mf when it is a Warmer; a segment that is not has nothing to
// warm.
func Warm(ctx context.Context, mf MappedFile, opts WarmOptions) error {
	if w, ok := mf.(Warmer); ok {
		return w.Warm(ctx, opts)
	}
	return nil
}

// Cool undoes Warm on mf when it is a Warmer.
func Cool(mf MappedFile) error {
	if w, ok := mf.(Warmer); ok {
		return w.Cool()
	}
	return nil
}

// Zeros is how the zeros of a pre-written file (Spec.Prewrite) were written.
type Zeros uint8

const (
	// ZerosByDevice: fallocate(FALLOC_FL_WRITE_ZEROES), the device writing
	// them (Linux 6.17+, an O_DIRECT file on a device with WRITE ZEROES).
	ZerosByDevice Zeros = iota + 1
	// ZerosDirect: O_DIRECT writes of zeros (an O_DIRECT file where the
	// kernel, the file system or the device has no WRITE_ZEROES).
	ZerosDirect
	// ZerosCached: writes of zeros through the page cache (a buffered file).
	ZerosCached
)

// String says how, as in "3 segments written …" (mqbench's summary).
func (z Zeros) String() string {
	switch z {
	case ZerosByDevice:
		return "by the device (fallocate FALLOC_FL_WRITE_ZEROES)"
	case ZerosDirect:
		return "with O_DIRECT writes of zeros"
	case ZerosCached:
		return "with zeros through the page cache"
	}
	return "without zeros"
}
