package mappedfile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"sort"
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

// MemFS is an in-memory file system for tests, with a crash model that loses
// what a real machine loses. It implements Backend (segment files), Lister
// and DirLister, and the engine's directory operations (MkdirAll, List,
// ListDirs, Exists, ReadFile, WriteFile, Rename, Remove, SyncDir, SyncFile:
// engine/storefs.FS), so every file of a store — segments, ConsumeQueues,
// index files, checkpoint, abort file, stored parameters — goes through it.
//
// The model, per file: the disk (what survives a power loss), the page cache
// (what every reader sees; survives a killed process), and for a buffered
// file the writer's own buffer (lost with the process). Appends and
// overwrites go to the page cache (write-through) or to the buffer, then to
// the page cache on Commit; a page-cache byte reaches the disk only when
// synced (Flush, SyncFile, Truncate's zeroing, WriteFile) — or by chance,
// when a power loss tears the write-back (TornTail).
//
// Per directory: the names the running system sees, and the names on disk. A
// creation, rename or removal reaches the disk only when the directory is
// synced (SyncDir; MkdirAll syncs the parent of each directory it creates,
// and Open of a new segment file syncs its directory, as the real backends'
// create-sync-rename-sync does). On a power loss each unsynced name change
// independently survives or not; a directory that does not survive takes
// everything under it.
//
// Crash (power loss) and Kill (the process dies, the machine stays up) stop
// every open file and put the file system down: until Restart every
// operation fails with ErrClosed, so a dead store's background work cannot
// touch the state the next Open recovers. ArmCrash and ArmKill make the n-th
// operation from now on crash it, for deterministic crash points (a power
// loss in the middle of recovery); Clone copies the state.
type MemFS struct {
	opts MemOptions

	// ops counts the operations that change state or sync (reads do not).
	ops   atomic.Int64
	armed atomic.Pointer[memTrigger]

	mu           sync.Mutex
	nodes        map[string]*memNode // the names the running system sees
	dirs         map[string]bool
	durableNodes map[string]*memNode // the names on disk
	durableDirs  map[string]bool
	down         bool // after Crash or Kill, until Restart

	// making, when set, runs while Open makes a new file's bytes, with no
	// lock held (a test's window into that moment).
	making func(path string)
}

// memTrigger is an armed crash: when the operation count reaches at, fire runs.
type memTrigger struct {
	at   int64
	fire func()
}

// memNode is one file (an inode).
type memNode struct {
	// open is the open instance, nil when none. Guarded by MemFS.mu.
	open *memFile

	// mu guards the fields below. Lock order: memFile.mu, then memNode.mu,
	// then MemFS.mu is never taken while holding it.
	mu        sync.Mutex
	sizeBytes int64
	disk      []byte // what survives a power loss
	cache     []byte // the page cache; nil means equal to disk
	// [dirtyFrom, dirtyTo) covers every byte of cache that differs from
	// disk (dirtyFrom == dirtyTo: clean).
	dirtyFrom, dirtyTo int64
	// appendedFrom is the lowest position appended (into the page cache)
	// since the last sync, -1 when none: the range a torn write-back can fill
	// with garbage (space that was never written before).
	appendedFrom int64
}

// NewMemFS returns an empty in-memory file system.
func NewMemFS(opts MemOptions) *MemFS {
	return &MemFS{opts: opts, nodes: make(map[string]*memNode), dirs: make(map[string]bool),
		durableNodes: make(map[string]*memNode), durableDirs: make(map[string]bool)}
}

// Name implements Backend.
func (fs *MemFS) Name() string { return "mem" }

var errNotExist = fmt.Errorf("mappedfile: no such file or directory: %w", fs.ErrNotExist)

// errDown is returned by every operation while the file system is down.
var errDown = fmt.Errorf("mappedfile: the in-memory file system is down after a crash or kill (Restart it): %w", ErrClosed)

// tick counts one operation and fires an armed crash or kill when its count
// is reached. It is called first thing in every counted operation, with no
// lock held.
func (fs *MemFS) tick() {
	n := fs.ops.Add(1)
	if t := fs.armed.Load(); t != nil && n >= t.at && fs.armed.CompareAndSwap(t, nil) {
		t.fire()
	}
}

// Ops returns how many operations (changes and syncs, not reads) ran so far.
func (fs *MemFS) Ops() int64 { return fs.ops.Load() }

// ArmCrash makes the n-th counted operation from now (n ≥ 1) begin with
// Crash(tail, rng): that operation and every later one fails.
func (fs *MemFS) ArmCrash(n int64, tail TornTail, rng *rand.Rand) {
	fs.armed.Store(&memTrigger{at: fs.ops.Load() + max(n, 1), fire: func() { fs.Crash(tail, rng) }})
}

// ArmKill is ArmCrash for Kill.
func (fs *MemFS) ArmKill(n int64) {
	fs.armed.Store(&memTrigger{at: fs.ops.Load() + max(n, 1), fire: fs.Kill})
}

// Disarm cancels an armed crash or kill that has not fired; it reports
// whether one was pending.
func (fs *MemFS) Disarm() bool { return fs.armed.Swap(nil) != nil }

// Restart brings the file system up after a Crash or Kill: the machine
// boots (after a power loss) or a new process starts (after a kill).
func (fs *MemFS) Restart() {
	fs.mu.Lock()
	fs.down = false
	fs.mu.Unlock()
}

// Down reports whether the file system is down (crashed or killed, not yet
// restarted).
func (fs *MemFS) Down() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.down
}

func isRootDir(dir string) bool { return filepath.Dir(dir) == dir }

// dirExistsLocked reports whether dir exists in the running namespace.
func (fs *MemFS) dirExistsLocked(dir string) bool { return isRootDir(dir) || fs.dirs[dir] }

// mkdirsLocked creates dir and its missing parents in the running
// namespace, returning those it created, shallowest first.
func (fs *MemFS) mkdirsLocked(dir string) []string {
	var made []string
	for d := dir; !fs.dirExistsLocked(d); d = filepath.Dir(d) {
		made = append(made, d)
	}
	for i, j := 0, len(made)-1; i < j; i, j = i+1, j-1 {
		made[i], made[j] = made[j], made[i]
	}
	for _, d := range made {
		fs.dirs[d] = true
	}
	return made
}

// syncDirLocked makes every name change in dir durable.
func (fs *MemFS) syncDirLocked(dir string) {
	for p, n := range fs.nodes {
		if filepath.Dir(p) == dir {
			fs.durableNodes[p] = n
		}
	}
	for p := range fs.durableNodes {
		if filepath.Dir(p) == dir && fs.nodes[p] == nil {
			delete(fs.durableNodes, p)
		}
	}
	for d := range fs.dirs {
		if filepath.Dir(d) == dir {
			fs.durableDirs[d] = true
		}
	}
	for d := range fs.durableDirs {
		if filepath.Dir(d) == dir && !fs.dirs[d] {
			delete(fs.durableDirs, d)
		}
	}
}

// Open implements Backend. A new file is created with its directory (and
// missing parents, which are not durable until their parents are synced),
// and its name is made durable as the real backends do (create under a
// temporary name, sync, rename, sync the directory).
func (fs *MemFS) Open(ctx context.Context, spec Spec) (MappedFile, error) {
	fs.tick()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open %s: %w", spec.Path, err)
	}
	if spec.SizeBytes <= 0 {
		return nil, fmt.Errorf("open %s: size %d: %w", spec.Path, spec.SizeBytes, ErrInvalidArgument)
	}
	path := filepath.Clean(spec.Path)
	// A new file's bytes are made before the lock is taken: zeroing a big
	// file (an IndexFile is hundreds of MiB) under it would hold up every
	// other file's operations, the next segment's creation among them.
	var fresh *memNode
	var buf []byte // a buffered file's own buffer
	if fs.opts.Buffered {
		buf = make([]byte, spec.SizeBytes)
	}
	for {
		fs.mu.Lock()
		node, existed, err := fs.lookupForOpenLocked(path, spec)
		if err != nil {
			fs.mu.Unlock()
			return nil, err
		}
		if !existed && fresh == nil {
			fs.mu.Unlock()
			if fs.making != nil {
				fs.making(path)
			}
			fresh = newMemNode(spec.SizeBytes)
			continue // look again: the file may have been made meanwhile
		}
		if !existed {
			node = fresh
			fs.mkdirsLocked(filepath.Dir(path))
			fs.nodes[path] = node
			fs.syncDirLocked(filepath.Dir(path))
		}
		f, err := fs.openNodeLocked(node, existed, path, spec, buf)
		fs.mu.Unlock()
		return f, err
	}
}

// newMemNode makes a file of size zero bytes. Zeros from make: pages fresh
// from the OS cost nothing until written, but heap pages a collected file
// left are cleared first, so a big file costs its size in memclr once the
// heap has held one (give test stores small IndexFiles).
func newMemNode(size int64) *memNode {
	return &memNode{sizeBytes: size, disk: make([]byte, size), cache: make([]byte, size), appendedFrom: -1}
}

// lookupForOpenLocked finds the file Open is asked for, or says it is new,
// or why it cannot be opened.
func (fs *MemFS) lookupForOpenLocked(path string, spec Spec) (node *memNode, existed bool, err error) {
	if fs.down {
		return nil, false, fmt.Errorf("open %s: %w", path, errDown)
	}
	if fs.dirs[path] {
		return nil, false, fmt.Errorf("open %s: is a directory: %w", path, ErrInvalidArgument)
	}
	node, existed = fs.nodes[path]
	if existed {
		if node.sizeBytes != spec.SizeBytes {
			return nil, false, fmt.Errorf("open %s: file has %d bytes, segment size is %d: %w",
				path, node.sizeBytes, spec.SizeBytes, ErrSizeMismatch)
		}
		if node.open != nil {
			return nil, false, fmt.Errorf("open %s: already open: %w", path, ErrInvalidArgument)
		}
	}
	return node, existed, nil
}

// openNodeLocked opens node, found (existed) or just made, at path; buf is
// a buffered file's buffer, of the file's size.
func (fs *MemFS) openNodeLocked(node *memNode, existed bool, path string, spec Spec, buf []byte) (MappedFile, error) {
	node.mu.Lock()
	if node.cache == nil {
		node.cache = make([]byte, node.sizeBytes)
		copy(node.cache, node.disk)
	}
	data := node.cache
	if fs.opts.Buffered {
		data = buf
		if existed {
			copy(data, node.cache)
		}
	}
	node.mu.Unlock()
	f := &memFile{fs: fs, node: node, path: path, fromOffset: spec.FromOffset, sizeBytes: spec.SizeBytes,
		buffered: fs.opts.Buffered, data: data, dirtyFrom: -1}
	f.refs.Init()
	if existed {
		f.wrotePosition.Store(spec.SizeBytes)
		f.committedPosition.Store(spec.SizeBytes)
		f.flushedPosition.Store(spec.SizeBytes)
	}
	node.open = f
	return f, nil
}

// list returns the names of the files (or directories) in dir.
func (fs *MemFS) list(dir string, dirs bool) ([]string, error) {
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return nil, fmt.Errorf("list %s: %w", dir, errDown)
	}
	if !fs.dirExistsLocked(dir) {
		return nil, fmt.Errorf("list %s: %w", dir, errNotExist)
	}
	names := []string{}
	if dirs {
		for d := range fs.dirs {
			if filepath.Dir(d) == dir {
				names = append(names, filepath.Base(d))
			}
		}
	} else {
		for p := range fs.nodes {
			if filepath.Dir(p) == dir {
				names = append(names, filepath.Base(p))
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// List implements Lister: the files in dir, sorted; an error wrapping
// fs.ErrNotExist when dir does not exist.
func (fs *MemFS) List(dir string) ([]string, error) { return fs.list(dir, false) }

// ListDirs implements DirLister: the directories in dir, sorted.
func (fs *MemFS) ListDirs(dir string) ([]string, error) { return fs.list(dir, true) }

// MkdirAll creates dir and its missing parents, syncing the parent of each
// (so they are durable).
func (fs *MemFS) MkdirAll(dir string) error {
	fs.tick()
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return fmt.Errorf("mkdir %s: %w", dir, errDown)
	}
	if fs.nodes[dir] != nil {
		return fmt.Errorf("mkdir %s: a file is in the way: %w", dir, ErrInvalidArgument)
	}
	for _, d := range fs.mkdirsLocked(dir) {
		fs.syncDirLocked(filepath.Dir(d))
	}
	return nil
}

// Exists reports whether a file or directory is at path.
func (fs *MemFS) Exists(path string) (bool, error) {
	path = filepath.Clean(path)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return false, fmt.Errorf("stat %s: %w", path, errDown)
	}
	return fs.nodes[path] != nil || fs.dirExistsLocked(path), nil
}

// ReadFile returns a copy of a file's content as a reader sees it.
func (fs *MemFS) ReadFile(path string) ([]byte, error) {
	path = filepath.Clean(path)
	fs.mu.Lock()
	node := fs.nodes[path]
	down := fs.down
	fs.mu.Unlock()
	if down {
		return nil, fmt.Errorf("read %s: %w", path, errDown)
	}
	if node == nil {
		return nil, fmt.Errorf("read %s: %w", path, errNotExist)
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if node.cache != nil {
		return append([]byte(nil), node.cache...), nil
	}
	return append([]byte(nil), node.disk...), nil
}

// WriteFile creates or truncates path, writes data and syncs it: the data
// is durable, a new name only once its directory is synced.
func (fs *MemFS) WriteFile(path string, data []byte) error {
	fs.tick()
	path = filepath.Clean(path)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return fmt.Errorf("write %s: %w", path, errDown)
	}
	if !fs.dirExistsLocked(filepath.Dir(path)) {
		return fmt.Errorf("write %s: %w", path, errNotExist)
	}
	node := fs.nodes[path]
	if node == nil {
		node = &memNode{appendedFrom: -1}
		fs.nodes[path] = node
	} else if node.open != nil {
		return fmt.Errorf("write %s: file is open: %w", path, ErrInvalidArgument)
	}
	node.mu.Lock()
	node.sizeBytes = int64(len(data))
	node.disk = append([]byte(nil), data...)
	node.cache = nil
	node.dirtyFrom, node.dirtyTo, node.appendedFrom = 0, 0, -1
	node.mu.Unlock()
	return nil
}

// Rename renames a file; durable once the directories are synced.
func (fs *MemFS) Rename(oldPath, newPath string) error {
	fs.tick()
	oldPath, newPath = filepath.Clean(oldPath), filepath.Clean(newPath)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return fmt.Errorf("rename %s: %w", oldPath, errDown)
	}
	node := fs.nodes[oldPath]
	if node == nil {
		return fmt.Errorf("rename %s: %w", oldPath, errNotExist)
	}
	if !fs.dirExistsLocked(filepath.Dir(newPath)) {
		return fmt.Errorf("rename %s to %s: %w", oldPath, newPath, errNotExist)
	}
	if old := fs.nodes[newPath]; old != nil && old.open != nil {
		return fmt.Errorf("rename %s over %s: the target is open: %w", oldPath, newPath, ErrInvalidArgument)
	}
	delete(fs.nodes, oldPath)
	fs.nodes[newPath] = node
	return nil
}

// Remove implements Lister: it removes a file that is not open; durable
// once the directory is synced.
func (fs *MemFS) Remove(path string) error {
	fs.tick()
	path = filepath.Clean(path)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return fmt.Errorf("remove %s: %w", path, errDown)
	}
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

// SyncDir makes the name changes in dir durable.
func (fs *MemFS) SyncDir(dir string) error {
	fs.tick()
	dir = filepath.Clean(dir)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.down {
		return fmt.Errorf("sync dir %s: %w", dir, errDown)
	}
	if !fs.dirExistsLocked(dir) {
		return fmt.Errorf("sync dir %s: %w", dir, errNotExist)
	}
	fs.syncDirLocked(dir)
	return nil
}

// SyncFile makes what the page cache holds of a file durable (fsync),
// whether or not it is open.
func (fs *MemFS) SyncFile(path string) error {
	fs.tick()
	path = filepath.Clean(path)
	fs.mu.Lock()
	node := fs.nodes[path]
	down := fs.down
	var f *memFile
	if node != nil {
		f = node.open
	}
	fs.mu.Unlock()
	if down {
		return fmt.Errorf("sync %s: %w", path, errDown)
	}
	if node == nil {
		return fmt.Errorf("sync %s: %w", path, errNotExist)
	}
	if f != nil {
		f.mu.Lock() // no append or commit changes the page cache meanwhile
		defer f.mu.Unlock()
	}
	node.mu.Lock()
	node.syncLocked()
	node.mu.Unlock()
	return nil
}

// syncLocked writes the dirty page-cache bytes to the disk.
func (n *memNode) syncLocked() {
	if n.dirtyTo > n.dirtyFrom && n.cache != nil {
		copyChanged(n.disk[n.dirtyFrom:n.dirtyTo], n.cache[n.dirtyFrom:n.dirtyTo])
	}
	n.dirtyFrom, n.dirtyTo, n.appendedFrom = 0, 0, -1
}

// copyChanged copies src into dst page by page, skipping pages already
// equal: a big file's untouched zero pages stay untouched (and unallocated).
func copyChanged(dst, src []byte) {
	for len(src) > 0 {
		n := min(len(src), PageSize)
		if !bytes.Equal(dst[:n], src[:n]) {
			copy(dst[:n], src[:n])
		}
		dst, src = dst[n:], src[n:]
	}
}

// dirtyLocked records that cache[from, to) changed.
func (n *memNode) dirtyLocked(from, to int64, appended bool) {
	if to <= from {
		return
	}
	if n.dirtyTo <= n.dirtyFrom {
		n.dirtyFrom, n.dirtyTo = from, to
	} else {
		n.dirtyFrom, n.dirtyTo = min(n.dirtyFrom, from), max(n.dirtyTo, to)
	}
	if appended && (n.appendedFrom < 0 || from < n.appendedFrom) {
		n.appendedFrom = from
	}
}

// Durable returns a copy of the bytes of path that would survive a power
// loss now (its disk content; false when the running system has no file at
// path).
func (fs *MemFS) Durable(path string) ([]byte, bool) {
	fs.mu.Lock()
	node, ok := fs.nodes[filepath.Clean(path)]
	fs.mu.Unlock()
	if !ok {
		return nil, false
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	return append([]byte(nil), node.disk...), true
}

// Clone returns a copy of the file system as it is now — page cache
// included, with no file open (as a killed process would leave it) and up.
// Files open in fs must not be written meanwhile.
func (fs *MemFS) Clone() *MemFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	c := NewMemFS(fs.opts)
	copies := map[*memNode]*memNode{}
	clone := func(n *memNode) *memNode {
		if n == nil {
			return nil
		}
		if m, ok := copies[n]; ok {
			return m
		}
		n.mu.Lock()
		m := &memNode{sizeBytes: n.sizeBytes, disk: append([]byte(nil), n.disk...), dirtyFrom: n.dirtyFrom, dirtyTo: n.dirtyTo,
			appendedFrom: n.appendedFrom}
		if n.cache != nil {
			m.cache = append([]byte(nil), n.cache...)
		}
		n.mu.Unlock()
		copies[n] = m
		return m
	}
	for p, n := range fs.nodes {
		c.nodes[p] = clone(n)
	}
	for p, n := range fs.durableNodes {
		c.durableNodes[p] = clone(n)
	}
	for d := range fs.dirs {
		c.dirs[d] = true
	}
	for d := range fs.durableDirs {
		c.durableDirs[d] = true
	}
	return c
}

// TornTail says what a power loss leaves of the page-cache bytes that were
// not synced (each file's dirty range).
type TornTail int

const (
	// TornNone: nothing unsynced reaches the disk.
	TornNone TornTail = iota
	// TornGarbage: random bytes over part of the appended, unsynced range
	// (space never written before).
	TornGarbage
	// TornPartialPage: a prefix of the unsynced bytes made it, ending inside
	// a page (a write-back cut short mid-page).
	TornPartialPage
	// TornRandomPages: random whole pages of the unsynced range made it, in
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
// calls on it return ErrClosed), the file system goes down until Restart,
// and every file keeps only its disk bytes plus, over its unsynced range,
// what tail says, drawn from rng. Each name change not synced in its
// directory survives or not at random (all are lost with a nil rng).
func (fs *MemFS) Crash(tail TornTail, rng *rand.Rand) {
	files := fs.stopAll()
	fs.mu.Lock()
	seen := map[*memNode]bool{}
	var all []*memNode
	collect := func(m map[string]*memNode) {
		paths := make([]string, 0, len(m))
		for p := range m {
			paths = append(paths, p)
		}
		sort.Strings(paths) // a seeded rng gives the same crash every run
		for _, p := range paths {
			if n := m[p]; !seen[n] {
				seen[n] = true
				all = append(all, n)
			}
		}
	}
	collect(fs.nodes)
	collect(fs.durableNodes)
	for _, n := range all {
		n.mu.Lock()
		if n.cache != nil && n.dirtyTo > n.dirtyFrom {
			applyTorn(n, tail, rng)
		}
		n.cache = nil // the page cache is gone; the next Open reads the disk
		n.dirtyFrom, n.dirtyTo, n.appendedFrom = 0, 0, -1
		n.mu.Unlock()
	}
	fs.loseUnsyncedNamesLocked(rng)
	fs.mu.Unlock()
	for _, f := range files {
		f.mu.Unlock()
	}
}

// loseUnsyncedNamesLocked replaces the running namespace by what is on disk:
// each unsynced change survives at random, and what lost its directory goes.
func (fs *MemFS) loseUnsyncedNamesLocked(rng *rand.Rand) {
	keep := func() bool { return rng != nil && rng.IntN(2) == 0 }
	var dirNames []string
	for d := range fs.dirs {
		dirNames = append(dirNames, d)
	}
	for d := range fs.durableDirs {
		if !fs.dirs[d] {
			dirNames = append(dirNames, d)
		}
	}
	sort.Strings(dirNames)
	dirs := map[string]bool{}
	for _, d := range dirNames {
		if fs.dirs[d] == fs.durableDirs[d] {
			dirs[d] = fs.dirs[d]
		} else if keep() {
			dirs[d] = fs.dirs[d]
		} else {
			dirs[d] = fs.durableDirs[d]
		}
	}
	// A directory lives only if its parent does (sorted: parents first).
	for _, d := range dirNames {
		if dirs[d] && !isRootDir(filepath.Dir(d)) && !dirs[filepath.Dir(d)] {
			dirs[d] = false
		}
	}
	var paths []string
	for p := range fs.nodes {
		paths = append(paths, p)
	}
	for p := range fs.durableNodes {
		if fs.nodes[p] == nil {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	nodes := map[string]*memNode{}
	for _, p := range paths {
		n := fs.durableNodes[p]
		if cur := fs.nodes[p]; cur != n && keep() {
			n = cur
		}
		if n != nil && (isRootDir(filepath.Dir(p)) || dirs[filepath.Dir(p)]) {
			nodes[p] = n
		}
	}
	fs.nodes, fs.durableNodes = nodes, make(map[string]*memNode, len(nodes))
	for p, n := range nodes {
		fs.durableNodes[p] = n
	}
	fs.dirs, fs.durableDirs = map[string]bool{}, map[string]bool{}
	for d, ok := range dirs {
		if ok {
			fs.dirs[d], fs.durableDirs[d] = true, true
		}
	}
}

// Kill simulates the death of the process (SIGKILL) on a machine that stays
// up: every open file is closed at once and the file system goes down until
// Restart. The page cache survives — every committed byte, overwrites
// included — but stays unsynced: a later Crash can still lose it. Only what
// was appended and not committed (a buffered backend's own buffers) is gone.
// Files are frozen together, so the state kept is one instant of the store.
func (fs *MemFS) Kill() {
	files := fs.stopAll()
	for _, f := range files {
		f.mu.Unlock()
	}
}

// stopAll puts the file system down, detaches every open file and returns
// them locked and marked crashed: an operation that held a file's lock
// finished first (it happened before the crash); any later one sees crashed
// under the lock and stops.
func (fs *MemFS) stopAll() []*memFile {
	fs.mu.Lock()
	fs.down = true
	var files []*memFile
	for _, node := range fs.nodes {
		if f := node.open; f != nil {
			node.open = nil
			files = append(files, f)
		}
	}
	for _, node := range fs.durableNodes {
		if f := node.open; f != nil { // deleted while open
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

// applyTorn writes to n's disk what a power loss leaves of its dirty range.
func applyTorn(n *memNode, tail TornTail, rng *rand.Rand) {
	from, to := n.dirtyFrom, n.dirtyTo
	switch tail {
	case TornGarbage:
		if n.appendedFrom < 0 || n.appendedFrom >= to {
			return
		}
		start := max(n.appendedFrom, from)
		end := start + 1 + rng.Int64N(to-start)
		for i := start; i < end; i++ {
			n.disk[i] = byte(rng.Uint32())
		}
	case TornPartialPage:
		end := from + 1 + rng.Int64N(to-from)
		if end%PageSize == 0 && end > from+1 {
			end-- // end inside a page
		}
		copy(n.disk[from:end], n.cache[from:end])
	case TornRandomPages:
		for p := from &^ (PageSize - 1); p < to; p += PageSize {
			if rng.IntN(2) == 0 {
				continue
			}
			a, b := max(p, from), min(p+PageSize, to)
			copy(n.disk[a:b], n.cache[a:b])
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
	mu sync.Mutex
	// data is the page cache itself for a write-through file, the writer's
	// own buffer for a buffered one.
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

// lock takes mu for a state change; it fails when the file crashed.
func (f *memFile) lock(op string) error {
	f.mu.Lock()
	if f.crashed.Load() {
		f.mu.Unlock()
		return fmt.Errorf("%s: %s: %w", f.path, op, ErrClosed)
	}
	return nil
}

// toCache records that data[from, to) of a write-through file changed (it
// is the page cache), or copies it there for a buffered file's commit.
func (f *memFile) toCache(from, to int64, appended bool) {
	n := f.node
	n.mu.Lock()
	if f.buffered {
		copyChanged(n.cache[from:to], f.data[from:to])
	}
	n.dirtyLocked(from, to, appended)
	n.mu.Unlock()
}

func (f *memFile) Append(n int, enc Encoder) (int64, error) {
	f.fs.tick()
	if err := f.usable(); err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("%s: append of %d bytes: %w", f.path, n, ErrInvalidArgument)
	}
	if err := f.lock("append"); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
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
		f.toCache(wrote, wrote+int64(n), true)
		f.committedPosition.Store(wrote + int64(n))
	}
	return wrote, nil
}

func (f *memFile) Commit(ctx context.Context, leastPages int) (int64, error) {
	f.fs.tick()
	if err := f.usable(); err != nil {
		return f.committedPosition.Load(), err
	}
	if err := ctx.Err(); err != nil {
		return f.committedPosition.Load(), fmt.Errorf("%s: commit: %w", f.path, err)
	}
	if err := f.lock("commit"); err != nil {
		return f.committedPosition.Load(), err
	}
	defer f.mu.Unlock()
	committed, wrote := f.committedPosition.Load(), f.wrotePosition.Load()
	if AbleTo(committed, wrote, f.sizeBytes, leastPages) {
		f.toCache(committed, wrote, true)
		f.committedPosition.Store(wrote)
		committed = wrote
	}
	return committed, nil
}

func (f *memFile) Flush(ctx context.Context, leastPages int) (int64, error) {
	f.fs.tick()
	if err := f.usable(); err != nil {
		return f.flushedPosition.Load(), err
	}
	if err := ctx.Err(); err != nil {
		return f.flushedPosition.Load(), fmt.Errorf("%s: flush: %w", f.path, err)
	}
	if err := f.lock("flush"); err != nil {
		return f.flushedPosition.Load(), err
	}
	defer f.mu.Unlock()
	flushed, committed := f.flushedPosition.Load(), f.committedPosition.Load()
	if f.dirtyFrom < 0 && !AbleTo(flushed, committed, f.sizeBytes, leastPages) {
		// Nothing this file appended or overwrote is pending: like msync of
		// an empty range or a skipped fdatasync, nothing is synced — not even
		// pages a killed process left dirty.
		return flushed, nil
	}
	f.node.mu.Lock()
	f.node.syncLocked()
	f.node.mu.Unlock()
	f.dirtyFrom = -1
	f.flushedPosition.Store(committed)
	return committed, nil
}

// WriteAt implements Overwriter.
func (f *memFile) WriteAt(p []byte, filePos int64) (int, error) {
	if err := f.swapAt(p, nil, filePos); err != nil {
		return 0, err
	}
	return len(p), nil
}

// SwapEach implements Overwriter.
func (f *memFile) SwapEach(p, old []byte, width int, filePos []int64) error {
	if err := f.usable(); err != nil {
		return err
	}
	if _, err := CheckSwapEach(f.path, p, old, width, filePos, f.wrotePosition.Load()); err != nil {
		return err
	}
	for i, pos := range filePos {
		if err := f.swapAt(p[i*width:(i+1)*width], old[i*width:(i+1)*width], pos); err != nil {
			return err
		}
	}
	return nil
}

// swapAt copies the bytes at filePos into old (when not nil), then p over them.
func (f *memFile) swapAt(p, old []byte, filePos int64) error {
	f.fs.tick()
	if err := f.usable(); err != nil {
		return err
	}
	if err := f.lock("overwrite"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	if filePos < 0 || filePos+int64(len(p)) > f.wrotePosition.Load() {
		return fmt.Errorf("%s: overwrite [%d,%d) past wrote %d: %w", f.path, filePos, filePos+int64(len(p)), f.wrotePosition.Load(), ErrOutOfRange)
	}
	copy(old, f.data[filePos:])
	copy(f.data[filePos:], p)
	// A buffered file's committed part is in the page cache: change it there
	// too (its uncommitted part goes with the next Commit).
	if end := min(filePos+int64(len(p)), f.committedPosition.Load()); end > filePos {
		f.toCache(filePos, end, false)
	}
	if f.dirtyFrom < 0 || filePos < f.dirtyFrom {
		f.dirtyFrom = filePos
	}
	return nil
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
	f.fs.tick()
	if err := f.usable(); err != nil {
		return err
	}
	if opts.Touch {
		if err := f.lock("warm"); err != nil {
			return err
		}
		clear(f.data[f.wrotePosition.Load():]) // zeros over zeros: nothing becomes dirty
		f.mu.Unlock()
	}
	return ctx.Err()
}

func (f *memFile) Cool() error { return f.usable() }

func (f *memFile) Retain() bool { return !f.crashed.Load() && f.refs.Retain() }
func (f *memFile) Release()     { f.refs.Release() }

// Truncate implements MappedFile: [validEnd, size) becomes zeros, durably;
// bytes below validEnd that the page cache holds unsynced stay unsynced
// (the contract promises only the zeroing).
func (f *memFile) Truncate(ctx context.Context, validEnd int64) error {
	f.fs.tick()
	if err := f.usable(); err != nil {
		return err
	}
	if validEnd < 0 || validEnd > f.sizeBytes {
		return fmt.Errorf("%s: truncate to %d of %d: %w", f.path, validEnd, f.sizeBytes, ErrOutOfRange)
	}
	if err := f.lock("truncate"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	clear(f.data[validEnd:])
	f.dirtyFrom = -1
	n := f.node
	n.mu.Lock()
	clear(n.cache[validEnd:])
	clear(n.disk[validEnd:])
	if n.dirtyTo > validEnd {
		n.dirtyTo = max(validEnd, n.dirtyFrom)
	}
	if n.appendedFrom >= validEnd {
		n.appendedFrom = -1
	}
	n.mu.Unlock()
	f.wrotePosition.Store(validEnd)
	f.committedPosition.Store(validEnd)
	f.flushedPosition.Store(validEnd)
	return ctx.Err()
}

// detach forgets f as its node's open instance; with remove, the name goes
// from the running namespace (durable once the directory is synced).
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
	f.fs.tick()
	if f.crashed.Load() || !f.refs.Shutdown(func() {}) {
		return fmt.Errorf("%s: delete: %w", f.path, ErrClosed)
	}
	f.detach(true)
	return nil
}
