package mappedfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// MemOptions configures a MemFS.
type MemOptions struct {
	// Buffered makes files behave like a buffered backend (transient, uring):
	// appended bytes become readable only when committed. Without it files are
	// write-through like mmap (committed == wrote).
	Buffered bool
}

// MemFS is an in-memory file system of segment files for tests. It remembers,
// per file, the bytes made durable by Flush; Crash throws everything else
// away (optionally leaving a torn tail), as a power loss would. It implements
// Backend and Lister.
type MemFS struct {
	opts MemOptions

	mu    sync.Mutex
	nodes map[string]*memNode
}

type memNode struct {
	sizeBytes int64
	durable   []byte   // what survives a crash
	open      *memFile // the open instance, nil when none
}

// NewMemFS returns an empty in-memory file system.
func NewMemFS(opts MemOptions) *MemFS {
	return &MemFS{opts: opts, nodes: make(map[string]*memNode)}
}

// Name implements Backend.
func (fs *MemFS) Name() string { return "mem" }

// Open implements Backend.
func (fs *MemFS) Open(ctx context.Context, spec Spec) (MappedFile, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open %s: %w", spec.Path, err)
	}
	if spec.SizeBytes <= 0 {
		return nil, fmt.Errorf("open %s: size %d: %w", spec.Path, spec.SizeBytes, ErrInvalidArgument)
	}
	path := filepath.Clean(spec.Path)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	node, existed := fs.nodes[path]
	if existed {
		if node.sizeBytes != spec.SizeBytes {
			return nil, fmt.Errorf("open %s: file has %d bytes, segment size is %d: %w",
				path, node.sizeBytes, spec.SizeBytes, ErrSizeMismatch)
		}
		if node.open != nil {
			return nil, fmt.Errorf("open %s: already open: %w", path, ErrInvalidArgument)
		}
	} else {
		node = &memNode{sizeBytes: spec.SizeBytes, durable: make([]byte, spec.SizeBytes)}
		fs.nodes[path] = node
	}
	f := &memFile{fs: fs, node: node, path: path, fromOffset: spec.FromOffset, sizeBytes: spec.SizeBytes,
		buffered: fs.opts.Buffered, data: make([]byte, spec.SizeBytes), dirtyFrom: -1}
	f.refs.Init()
	if existed {
		copy(f.data, node.durable)
		f.wrotePosition.Store(spec.SizeBytes)
		f.committedPosition.Store(spec.SizeBytes)
		f.flushedPosition.Store(spec.SizeBytes)
	}
	node.open = f
	return f, nil
}

// List implements Lister.
func (fs *MemFS) List(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var names []string
	for p := range fs.nodes {
		if filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	sort.Strings(names)
	return names, nil
}

// ListDirs implements DirLister.
func (fs *MemFS) ListDirs(dir string) ([]string, error) {
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	seen := map[string]bool{}
	for p := range fs.nodes {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		if name, _, deeper := strings.Cut(rest, string(filepath.Separator)); deeper {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// Remove implements Lister.
func (fs *MemFS) Remove(path string) error {
	path = filepath.Clean(path)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	node, ok := fs.nodes[path]
	if !ok {
		return fmt.Errorf("remove %s: %w", path, errNotExist)
	}
	if node.open != nil {
		return fmt.Errorf("remove %s: file is open: %w", path, ErrInvalidArgument)
	}
	delete(fs.nodes, path)
	return nil
}

var errNotExist = errors.New("mappedfile: no such file")

// Durable returns a copy of the bytes of path that would survive a crash now.
func (fs *MemFS) Durable(path string) ([]byte, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	node, ok := fs.nodes[filepath.Clean(path)]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), node.durable...), true
}

// TornTail says what a crash leaves after the last flushed byte of a file.
type TornTail int

const (
	// TornNone: nothing past the flushed position (zeros).
	TornNone TornTail = iota
	// TornGarbage: random bytes over part of the unflushed range.
	TornGarbage
	// TornPartialPage: a prefix of the unflushed bytes made it, ending inside
	// a page (a write cut short mid-page).
	TornPartialPage
	// TornRandomPages: random whole pages of the unflushed range made it, in
	// no order (the kernel's writeback order), the others did not.
	TornRandomPages
)

func (t TornTail) String() string {
	switch t {
	case TornNone:
		return "none"
	case TornGarbage:
		return "garbage"
	case TornPartialPage:
		return "partial-page"
	case TornRandomPages:
		return "random-pages"
	}
	return fmt.Sprintf("TornTail(%d)", int(t))
}

// Crash simulates a power loss: every open file is closed at once (later
// calls on it return ErrClosed) and every file keeps only its durable bytes,
// plus, past each open file's flushed position, what tail says, drawn from rng.
func (fs *MemFS) Crash(tail TornTail, rng *rand.Rand) {
	files := fs.stopAll()
	fs.mu.Lock()
	for _, f := range files {
		flushed, wrote := f.flushedPosition.Load(), f.wrotePosition.Load()
		if wrote > flushed {
			applyTorn(f.node.durable, f.data, flushed, wrote, tail, rng)
		}
	}
	fs.mu.Unlock()
	for _, f := range files {
		f.mu.Unlock()
	}
}

// Kill simulates the death of the process (SIGKILL) on a machine that stays
// up: every open file is closed at once and keeps what the page cache holds
// — every committed byte, overwrites included — losing only what was
// appended but not committed (a buffered backend's own buffers). Files are
// frozen together, so the state kept is one instant of the whole store.
func (fs *MemFS) Kill() {
	files := fs.stopAll()
	fs.mu.Lock()
	for _, f := range files {
		committed := f.committedPosition.Load()
		copy(f.node.durable[:committed], f.data[:committed])
	}
	fs.mu.Unlock()
	for _, f := range files {
		f.mu.Unlock()
	}
}

// stopAll detaches every open file and returns them locked and marked
// crashed: an operation that held a file's lock finished first (it happened
// before the crash); any later one sees crashed under the lock and stops.
func (fs *MemFS) stopAll() []*memFile {
	fs.mu.Lock()
	var files []*memFile
	for _, node := range fs.nodes {
		if f := node.open; f != nil {
			node.open = nil
			files = append(files, f)
		}
	}
	fs.mu.Unlock()
	// Lock them all before marking any: no file changes while another is
	// already frozen. (No code path holds two file locks, so any order is
	// safe.)
	for _, f := range files {
		f.mu.Lock()
	}
	for _, f := range files {
		f.crashed.Store(true)
	}
	return files
}

func applyTorn(durable, live []byte, flushed, wrote int64, tail TornTail, rng *rand.Rand) {
	pending := wrote - flushed
	switch tail {
	case TornGarbage:
		n := 1 + rng.Int64N(pending)
		for i := flushed; i < flushed+n; i++ {
			durable[i] = byte(rng.Uint32())
		}
	case TornPartialPage:
		n := 1 + rng.Int64N(pending)
		end := flushed + n
		if end%PageSize == 0 && end > flushed+1 {
			end-- // end inside a page
		}
		copy(durable[flushed:end], live[flushed:end])
	case TornRandomPages:
		for p := flushed &^ (PageSize - 1); p < wrote; p += PageSize {
			if rng.IntN(2) == 0 {
				continue
			}
			from, to := max(p, flushed), min(p+PageSize, wrote)
			copy(durable[from:to], live[from:to])
		}
	}
}

// memFile is one open file of a MemFS.
type memFile struct {
	fs         *MemFS
	node       *memNode
	path       string
	fromOffset int64
	sizeBytes  int64
	buffered   bool

	// mu serializes state changes (Append, Commit, Flush, Truncate, Crash).
	// Readers do not take it: they read below the readable position, which
	// only ever grows while bytes below it never change.
	mu   sync.Mutex
	data []byte

	wrotePosition     atomic.Int64
	committedPosition atomic.Int64
	flushedPosition   atomic.Int64
	stickyErr         atomic.Pointer[error]
	crashed           atomic.Bool
	// dirtyFrom is the lowest overwritten position not yet flushed
	// (-1: none). Guarded by mu.
	dirtyFrom int64
	refs      RefCount
}

func (f *memFile) Path() string         { return f.path }
func (f *memFile) FromOffset() int64    { return f.fromOffset }
func (f *memFile) SizeBytes() int64     { return f.sizeBytes }
func (f *memFile) WrotePosition() int64 { return f.wrotePosition.Load() }
func (f *memFile) CommittedPosition() int64 {
	return f.committedPosition.Load()
}
func (f *memFile) FlushedPosition() int64 { return f.flushedPosition.Load() }

func (f *memFile) ReadablePosition() int64 {
	if f.buffered {
		return f.committedPosition.Load()
	}
	return f.wrotePosition.Load()
}

func (f *memFile) Err() error {
	if p := f.stickyErr.Load(); p != nil {
		return *p
	}
	return nil
}

// usable returns the error that stops a state change, if any.
func (f *memFile) usable() error {
	if f.crashed.Load() || f.refs.Closing() {
		return fmt.Errorf("%s: %w", f.path, ErrClosed)
	}
	return f.Err()
}

func (f *memFile) Append(n int, enc Encoder) (int64, error) {
	if err := f.usable(); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("%s: append of %d bytes: %w", f.path, n, ErrInvalidArgument)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed.Load() {
		return 0, fmt.Errorf("%s: append: %w", f.path, ErrClosed)
	}
	wrote := f.wrotePosition.Load()
	if int64(n) > f.sizeBytes-wrote {
		return 0, fmt.Errorf("%s: append of %d bytes at %d of %d: %w", f.path, n, wrote, f.sizeBytes, ErrFull)
	}
	dst := f.data[wrote : wrote+int64(n)]
	if err := enc.EncodeAt(dst, wrote); err != nil {
		clear(dst)
		return 0, fmt.Errorf("%s: encode at %d: %w", f.path, wrote, err)
	}
	f.wrotePosition.Store(wrote + int64(n))
	if !f.buffered {
		f.committedPosition.Store(wrote + int64(n))
	}
	return wrote, nil
}

func (f *memFile) Commit(ctx context.Context, leastPages int) (int64, error) {
	if err := f.usable(); err != nil {
		return f.committedPosition.Load(), err
	}
	if err := ctx.Err(); err != nil {
		return f.committedPosition.Load(), fmt.Errorf("%s: commit: %w", f.path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed.Load() {
		return f.committedPosition.Load(), fmt.Errorf("%s: commit: %w", f.path, ErrClosed)
	}
	committed, wrote := f.committedPosition.Load(), f.wrotePosition.Load()
	if AbleTo(committed, wrote, f.sizeBytes, leastPages) {
		f.committedPosition.Store(wrote)
		committed = wrote
	}
	return committed, nil
}

func (f *memFile) Flush(ctx context.Context, leastPages int) (int64, error) {
	if err := f.usable(); err != nil {
		return f.flushedPosition.Load(), err
	}
	if err := ctx.Err(); err != nil {
		return f.flushedPosition.Load(), fmt.Errorf("%s: flush: %w", f.path, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed.Load() {
		return f.flushedPosition.Load(), fmt.Errorf("%s: flush: %w", f.path, ErrClosed)
	}
	flushed, committed := f.flushedPosition.Load(), f.committedPosition.Load()
	from := flushed
	if f.dirtyFrom >= 0 {
		from = min(from, f.dirtyFrom)
	} else if !AbleTo(flushed, committed, f.sizeBytes, leastPages) {
		return flushed, nil
	}
	f.fs.mu.Lock()
	copy(f.node.durable[from:committed], f.data[from:committed])
	f.fs.mu.Unlock()
	f.dirtyFrom = -1
	f.flushedPosition.Store(committed)
	return committed, nil
}

// WriteAt implements Overwriter.
func (f *memFile) WriteAt(p []byte, filePos int64) (int, error) {
	if err := f.usable(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed.Load() {
		return 0, fmt.Errorf("%s: overwrite: %w", f.path, ErrClosed)
	}
	if filePos < 0 || filePos+int64(len(p)) > f.wrotePosition.Load() {
		return 0, fmt.Errorf("%s: overwrite [%d,%d) past wrote %d: %w", f.path, filePos, filePos+int64(len(p)), f.wrotePosition.Load(), ErrOutOfRange)
	}
	copy(f.data[filePos:], p)
	if f.dirtyFrom < 0 || filePos < f.dirtyFrom {
		f.dirtyFrom = filePos
	}
	return len(p), nil
}

func (f *memFile) ReadAt(dst []byte, filePos int64) (int, error) {
	if f.crashed.Load() || !f.refs.Acquire() {
		return 0, fmt.Errorf("%s: read: %w", f.path, ErrClosed)
	}
	defer f.refs.Release()
	n, err := CheckRead(filePos, len(dst), f.ReadablePosition())
	if n > 0 {
		copy(dst[:n], f.data[filePos:])
	}
	return n, err
}

func (f *memFile) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if f.crashed.Load() || !f.refs.Acquire() {
		return 0, fmt.Errorf("%s: send: %w", f.path, ErrClosed)
	}
	defer f.refs.Release()
	if filePos < 0 || n < 0 || filePos+n > f.ReadablePosition() {
		return 0, fmt.Errorf("%s: send [%d,%d) past readable %d: %w", f.path, filePos, filePos+n, f.ReadablePosition(), ErrOutOfRange)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s: send: %w", f.path, err)
	}
	m, err := w.Write(f.data[filePos : filePos+n])
	if err != nil {
		return int64(m), fmt.Errorf("%s: send: %w", f.path, err)
	}
	return int64(m), nil
}

func (f *memFile) Warm(ctx context.Context, opts WarmOptions) error {
	if err := f.usable(); err != nil {
		return err
	}
	if opts.Touch {
		f.mu.Lock()
		clear(f.data[f.wrotePosition.Load():])
		f.mu.Unlock()
	}
	return ctx.Err()
}

func (f *memFile) Cool() error { return f.usable() }

func (f *memFile) Retain() bool { return !f.crashed.Load() && f.refs.Retain() }
func (f *memFile) Release()     { f.refs.Release() }

func (f *memFile) Truncate(ctx context.Context, validEnd int64) error {
	if err := f.usable(); err != nil {
		return err
	}
	if validEnd < 0 || validEnd > f.sizeBytes {
		return fmt.Errorf("%s: truncate to %d of %d: %w", f.path, validEnd, f.sizeBytes, ErrOutOfRange)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed.Load() {
		return fmt.Errorf("%s: truncate: %w", f.path, ErrClosed)
	}
	clear(f.data[validEnd:])
	f.dirtyFrom = -1
	f.fs.mu.Lock()
	clear(f.node.durable[validEnd:])
	f.fs.mu.Unlock()
	f.wrotePosition.Store(validEnd)
	f.committedPosition.Store(validEnd)
	f.flushedPosition.Store(validEnd)
	return ctx.Err()
}

func (f *memFile) detach(remove bool) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.node.open == f {
		f.node.open = nil
	}
	if remove && f.fs.nodes[f.path] == f.node {
		delete(f.fs.nodes, f.path)
	}
}

func (f *memFile) Close() error {
	if f.crashed.Load() || !f.refs.Shutdown(func() {}) {
		return fmt.Errorf("%s: close: %w", f.path, ErrClosed)
	}
	f.detach(false)
	return nil
}

func (f *memFile) Delete() error {
	if f.crashed.Load() || !f.refs.Shutdown(func() {}) {
		return fmt.Errorf("%s: delete: %w", f.path, ErrClosed)
	}
	f.detach(true)
	return nil
}
