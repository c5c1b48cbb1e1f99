//go:build linux

package crashfs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Names says which name changes a power loss keeps.
type Names string

const (
	// NamesDurable: every create, rename and unlink survives (as LazyFS).
	NamesDurable Names = "durable"
	// NamesStrict: a name change survives only when every directory it
	// touched was fsynced after it.
	NamesStrict Names = "strict"
)

// Config is one daemon's setting.
type Config struct {
	Backing string // the durable image
	Mount   string // where the file system is mounted
	// State holds the names journal and its graveyard (names=strict);
	// it must be on the backing directory's file system.
	State string
	Names Names
	// DIOAlign, when positive, makes a read or write of a file opened
	// O_DIRECT fail with EINVAL unless its offset and length are multiples
	// of it, as a device with that logical block does. The buffer's
	// address does not cross FUSE and is not checked.
	DIOAlign int64
	// Writeback: a crash keeps a seeded random subset of the unsynced
	// pages the daemon holds (whole or torn at 512-byte sectors) and, at
	// random, each file's running size — writeback that happened before the
	// cut. Without it a crash loses every unsynced byte.
	Writeback bool
	Seed      uint64
	// CrashAfterFsync, when positive, arms a crash point: the daemon
	// applies the n-th FSYNC or FSYNCDIR of a path (relative to the root)
	// matching CrashPath, does not answer it, and crashes.
	CrashAfterFsync int
	CrashPath       string
	Report          string // where the crash report is written (outside the backing)
}

func (c Config) validate() error {
	switch {
	case c.Backing == "" || c.Mount == "":
		return fmt.Errorf("crashfs: the backing directory and the mount point are required")
	case c.Names != NamesDurable && c.Names != NamesStrict:
		return fmt.Errorf("crashfs: names %q: want %q or %q", c.Names, NamesDurable, NamesStrict)
	case c.Names == NamesStrict && c.State == "":
		return fmt.Errorf("crashfs: names=strict needs a state directory")
	case c.DIOAlign < 0 || c.DIOAlign&(c.DIOAlign-1) != 0:
		return fmt.Errorf("crashfs: O_DIRECT alignment %d is not a power of two", c.DIOAlign)
	case c.CrashAfterFsync < 0:
		return fmt.Errorf("crashfs: crash after fsync %d: must not be negative", c.CrashAfterFsync)
	}
	if _, err := regexp.Compile(c.CrashPath); err != nil {
		return fmt.Errorf("crashfs: crash path: %w", err)
	}
	return nil
}

// Report is what a crash did, for a failure's replay.
type Report struct {
	Seed      uint64       `json:"seed"`
	Reason    string       `json:"reason"`
	Writeback bool         `json:"writeback"`
	Names     Names        `json:"names"`
	Fsyncs    int64        `json:"fsyncs"` // FSYNC and FSYNCDIR requests served
	Files     []FileReport `json:"files,omitempty"`
	Undone    []NameUndo   `json:"undone,omitempty"` // names=strict: the name changes lost
	// AllUnsyncedLost: the daemon was killed, so its unsynced pages were
	// all lost and are not listed.
	AllUnsyncedLost bool `json:"allUnsyncedLost,omitempty"`
}

// fsys is the daemon's state.
type fsys struct {
	cfg     Config
	re      *regexp.Regexp
	log     *slog.Logger
	names   *journal // names=strict
	gate    sync.RWMutex
	crashed atomic.Bool
	fsyncs  atomic.Int64
	armed   atomic.Int64 // matching fsyncs so far

	mu     sync.Mutex
	inodes map[uint64]*inode
}

// enter admits a request; once a crash has begun no request proceeds (and
// none is answered). A request enters once: a second RLock behind the
// crash's pending Lock would never be granted.
func (s *fsys) enter() {
	s.gate.RLock()
	if s.crashed.Load() {
		s.gate.RUnlock()
		select {}
	}
}

func (s *fsys) leave() { s.gate.RUnlock() }

// crash stops the file system where it is, applies the power loss to the
// backing directory, writes the report and exits: the kernel's connection
// dies with the process, and with it the FUSE page cache. The caller must
// not be inside enter.
func (s *fsys) crash(reason string) {
	if s.crashed.Swap(true) {
		select {}
	}
	s.gate.Lock()
	rep := Report{Seed: s.cfg.Seed, Reason: reason, Writeback: s.cfg.Writeback, Names: s.cfg.Names, Fsyncs: s.fsyncs.Load()}
	var rng *rand.Rand
	if s.cfg.Writeback {
		rng = rand.New(rand.NewPCG(s.cfg.Seed, 0x6372617368))
	}
	s.mu.Lock()
	inodes := make([]*inode, 0, len(s.inodes))
	for _, n := range s.inodes {
		inodes = append(inodes, n)
	}
	s.mu.Unlock()
	slices.SortFunc(inodes, func(a, b *inode) int {
		if a.path != b.path {
			if a.path < b.path {
				return -1
			}
			return 1
		}
		return int(a.ino - b.ino)
	})
	for _, n := range inodes {
		n.mu.Lock()
		if n.dirty() {
			rep.Files = append(rep.Files, n.powerLoss(rng))
		}
	}
	if s.names != nil {
		s.names.close()
		undone, err := Recover(s.cfg.State, s.cfg.Backing)
		rep.Undone = undone
		if err != nil {
			s.log.Error("crashfs: undo unsynced names", "err", err)
		}
	}
	if err := writeReport(s.cfg.Report, &rep); err != nil {
		s.log.Error("crashfs: write the crash report", "err", err)
	}
	s.log.Info("crashfs: power cut", "reason", reason, "files", len(rep.Files), "names undone", len(rep.Undone))
	os.Exit(0)
}

func writeReport(path string, rep *Report) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// inodeFor returns the overlay of the backing file at rel (opening the
// daemon's descriptor on first use).
func (s *fsys) inodeFor(rel string, st *syscall.Stat_t) (*inode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.inodes[st.Ino]; n != nil {
		n.mu.Lock()
		n.path = rel
		n.mu.Unlock()
		return n, nil
	}
	rw, err := os.OpenFile(filepath.Join(s.cfg.Backing, rel), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	var st2 syscall.Stat_t
	if err := syscall.Fstat(int(rw.Fd()), &st2); err != nil || st2.Ino != st.Ino {
		rw.Close()
		return nil, syscall.ESTALE
	}
	n, err := newInode(st.Ino, rel, rw)
	if err != nil {
		rw.Close()
		return nil, err
	}
	s.inodes[st.Ino] = n
	return n, nil
}

// known returns the overlay of inode ino, if it has one.
func (s *fsys) known(ino uint64) *inode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inodes[ino]
}

// forget drops the overlay of a backing inode whose last name went (its
// number may be reused by the next file).
func (s *fsys) forget(st *syscall.Stat_t) {
	if st.Nlink > 1 || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// An open handle may still use the overlay (and its descriptor).
	delete(s.inodes, st.Ino)
}

// node is a loopback node whose files go through the overlay.
type node struct {
	*fs.LoopbackNode
	s *fsys
}

// WrapChild makes every node the loopback creates (Lookup, Mkdir, …) a
// crashfs node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if ln, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: ln, s: n.s}
	}
	return ops
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeWrapChilder    = (*node)(nil)
)

// rel is the node's path relative to the backing root ("." for the root).
func (n *node) rel() string {
	p := n.Path(nil)
	if p == "" {
		return "."
	}
	return p
}

func (n *node) abs() string { return filepath.Join(n.s.cfg.Backing, n.rel()) }

func (n *node) child(name string) string { return filepath.Join(n.rel(), name) }

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

// sizeFix replaces the backing size in an attribute by the running size.
func (n *node) sizeFix(a *fuse.Attr) {
	if ov := n.s.known(a.Ino); ov != nil {
		ov.mu.Lock()
		a.Size = uint64(ov.size)
		a.Blocks = (a.Size + 511) / 512
		ov.mu.Unlock()
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ch, e := n.LoopbackNode.Lookup(ctx, name, out)
	if e == 0 {
		n.sizeFix(&out.Attr)
	}
	return ch, e
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.s.enter()
	defer n.s.leave()
	return n.getattr(f, out)
}

func (n *node) getattr(f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	var err error
	if fh, ok := f.(*file); ok {
		err = syscall.Fstat(int(fh.ov.rw.Fd()), &st)
	} else {
		err = syscall.Lstat(n.abs(), &st)
	}
	if err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	if fh, ok := f.(*file); ok {
		fh.ov.mu.Lock()
		out.Size = uint64(fh.ov.size)
		out.Blocks = (out.Size + 511) / 512
		fh.ov.mu.Unlock()
	} else {
		n.sizeFix(&out.Attr)
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.s.enter()
	defer n.s.leave()
	if size, ok := in.GetSize(); ok {
		ov, e := n.overlay(f)
		if e != 0 {
			return e
		}
		ov.mu.Lock()
		err := ov.truncate(int64(size))
		ov.mu.Unlock()
		if err != nil {
			return errno(err)
		}
	}
	rest := *in
	rest.Valid &^= fuse.FATTR_SIZE
	if rest.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID|fuse.FATTR_ATIME|fuse.FATTR_MTIME) != 0 {
		if e := n.LoopbackNode.Setattr(ctx, nil, &rest, out); e != 0 {
			return e
		}
	}
	return n.getattr(f, out)
}

// overlay returns the overlay of this regular file.
func (n *node) overlay(f fs.FileHandle) (*inode, syscall.Errno) {
	if fh, ok := f.(*file); ok {
		return fh.ov, 0
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.abs(), &st); err != nil {
		return nil, errno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, syscall.EINVAL
	}
	ov, err := n.s.inodeFor(n.rel(), &st)
	if err != nil {
		return nil, errno(err)
	}
	return ov, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ov, e := n.overlay(nil)
	if e != 0 {
		return nil, 0, e
	}
	if flags&syscall.O_TRUNC != 0 {
		ov.mu.Lock()
		err := ov.truncate(0)
		ov.mu.Unlock()
		if err != nil {
			return nil, 0, errno(err)
		}
	}
	// No FOPEN_DIRECT_IO (RWF_DSYNC would stop producing FSYNC) and no
	// passthrough (the kernel would bypass the daemon); no KEEP_CACHE.
	return &file{s: n.s, ov: ov, direct: flags&syscall.O_DIRECT != 0}, 0, 0
}

func genOf(fd int) uint64 {
	var sx unix.Statx_t
	if unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BTIME, &sx) != nil || sx.Mask&unix.STATX_BTIME == 0 ||
		(sx.Btime.Sec == 0 && sx.Btime.Nsec == 0) {
		return 1
	}
	return uint64(sx.Btime.Sec)*1e9 + uint64(sx.Btime.Nsec)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	rel := n.child(name)
	p := filepath.Join(n.s.cfg.Backing, rel)
	_, statErr := os.Lstat(p)
	existed := statErr == nil
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CREAT|int(flags&syscall.O_EXCL), mode)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	defer syscall.Close(fd)
	if !existed && n.s.names != nil {
		if err := n.s.names.log(nameOp{Op: "create", Path: rel}); err != nil {
			return nil, nil, 0, syscall.EIO
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, nil, 0, errno(err)
	}
	ov, err := n.s.inodeFor(rel, &st)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	if existed && flags&syscall.O_TRUNC != 0 {
		ov.mu.Lock()
		err = ov.truncate(0)
		ov.mu.Unlock()
		if err != nil {
			return nil, nil, 0, errno(err)
		}
	}
	out.FromStat(&st)
	n.sizeFix(&out.Attr)
	ch := n.NewInode(ctx, &fs.LoopbackNode{RootData: n.RootData}, fs.StableAttr{Mode: st.Mode, Ino: st.Ino, Gen: genOf(fd)})
	return ch, &file{s: n.s, ov: ov, direct: flags&syscall.O_DIRECT != 0}, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ch, e := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if e == 0 && n.s.names != nil {
		if err := n.s.names.log(nameOp{Op: "mkdir", Path: n.child(name)}); err != nil {
			return nil, syscall.EIO
		}
	}
	return ch, e
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.s.enter()
	defer n.s.leave()
	e := n.LoopbackNode.Rmdir(ctx, name)
	if e == 0 && n.s.names != nil {
		if err := n.s.names.log(nameOp{Op: "rmdir", Path: n.child(name)}); err != nil {
			return syscall.EIO
		}
	}
	return e
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.s.enter()
	defer n.s.leave()
	rel := n.child(name)
	p := filepath.Join(n.s.cfg.Backing, rel)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return errno(err)
	}
	if n.s.names == nil {
		if err := syscall.Unlink(p); err != nil {
			return errno(err)
		}
		n.s.forget(&st)
		return 0
	}
	// Into the graveyard: the inode (and its overlay) lives on, for an undo.
	abs, g := n.s.names.grave()
	if err := syscall.Rename(p, abs); err != nil {
		return errno(err)
	}
	if err := n.s.names.log(nameOp{Op: "unlink", Path: rel, Grave: g}); err != nil {
		return syscall.EIO
	}
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.s.enter()
	defer n.s.leave()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	from, to := n.child(name), np.child(newName)
	pFrom, pTo := filepath.Join(n.s.cfg.Backing, from), filepath.Join(n.s.cfg.Backing, to)
	var target syscall.Stat_t
	targetErr := syscall.Lstat(pTo, &target)
	if n.s.names == nil {
		if e := n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags); e != 0 {
			return e
		}
		if targetErr == nil && flags&unix.RENAME_EXCHANGE == 0 {
			n.s.forget(&target)
		}
		n.s.renamed(pTo, to)
		return 0
	}
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and whiteouts are not modelled with names=strict
	}
	if targetErr == nil && flags&unix.RENAME_NOREPLACE != 0 {
		return syscall.EEXIST
	}
	op := nameOp{Op: "rename", Path: from, To: to}
	if targetErr == nil {
		// Keep what the rename replaces: a hard link for a file (the
		// rename itself stays atomic), the directory itself otherwise.
		abs, g := n.s.names.grave()
		var err error
		if target.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			err = syscall.Rename(pTo, abs)
		} else {
			err = syscall.Link(pTo, abs)
		}
		if err != nil {
			return errno(err)
		}
		op.Grave = g
	}
	if err := syscall.Rename(pFrom, pTo); err != nil {
		if op.Grave != "" && target.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			os.Remove(filepath.Join(n.s.cfg.State, graveName, op.Grave))
		}
		return errno(err)
	}
	if err := n.s.names.log(op); err != nil {
		return syscall.EIO
	}
	n.s.renamed(pTo, to)
	return 0
}

// renamed keeps an overlay's path (for reports) after a rename.
func (s *fsys) renamed(abs, rel string) {
	var st syscall.Stat_t
	if syscall.Lstat(abs, &st) != nil {
		return
	}
	if ov := s.known(st.Ino); ov != nil {
		ov.mu.Lock()
		ov.path = rel
		ov.mu.Unlock()
	}
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ch, e := n.LoopbackNode.Link(ctx, target, name, out)
	if e == 0 {
		n.sizeFix(&out.Attr)
		if n.s.names != nil {
			if err := n.s.names.log(nameOp{Op: "create", Path: n.child(name)}); err != nil {
				return nil, syscall.EIO
			}
		}
	}
	return ch, e
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ch, e := n.LoopbackNode.Symlink(ctx, target, name, out)
	if e == 0 && n.s.names != nil {
		if err := n.s.names.log(nameOp{Op: "create", Path: n.child(name)}); err != nil {
			return nil, syscall.EIO
		}
	}
	return ch, e
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ch, e := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if e == 0 && n.s.names != nil {
		if err := n.s.names.log(nameOp{Op: "create", Path: n.child(name)}); err != nil {
			return nil, syscall.EIO
		}
	}
	return ch, e
}

// CopyFileRange would copy backing bytes behind the overlay's back: the
// kernel falls back to reads and writes.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle,
	offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Tmpfile (O_TMPFILE) is not modelled.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.s.enter()
	defer n.s.leave()
	ds, e := fs.NewLoopbackDirStream(n.abs())
	if e != 0 {
		return nil, 0, e
	}
	return &dir{ds: ds, n: n}, 0, 0
}

// fsynced counts a served FSYNC or FSYNCDIR and reports whether it is the
// armed crash point.
func (s *fsys) fsynced(rel string) bool {
	s.fsyncs.Add(1)
	if s.cfg.CrashAfterFsync <= 0 || !s.re.MatchString(rel) {
		return false
	}
	return s.armed.Add(1) == int64(s.cfg.CrashAfterFsync)
}

// dir is a directory handle: the loopback's listing, and FSYNCDIR, which
// makes the directory's name changes durable.
type dir struct {
	ds fs.DirStream
	n  *node
}

var (
	_ fs.FileReaddirenter = (*dir)(nil)
	_ fs.FileSeekdirer    = (*dir)(nil)
	_ fs.FileReleasedirer = (*dir)(nil)
	_ fs.FileFsyncdirer   = (*dir)(nil)
	_ fs.FileGetattrer    = (*dir)(nil)
	_ fs.NodeStatfser     = (*node)(nil)
	_ fs.FileReleaser     = (*file)(nil)
	_ fs.FileReader       = (*file)(nil)
	_ fs.FileWriter       = (*file)(nil)
	_ fs.FileFsyncer      = (*file)(nil)
	_ fs.FileFlusher      = (*file)(nil)
	_ fs.FileAllocater    = (*file)(nil)
	_ fs.FileLseeker      = (*file)(nil)
	_ fs.FileGetattrer    = (*file)(nil)
)

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dir) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	d.n.s.enter()
	defer d.n.s.leave()
	return d.n.getattr(nil, out)
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	s := d.n.s
	s.enter()
	rel := d.n.rel()
	var err error
	if s.names != nil {
		err = s.names.log(nameOp{Op: "sync", Path: rel})
	}
	crash := s.fsynced(rel)
	s.leave()
	if crash {
		s.crash(fmt.Sprintf("armed: FSYNCDIR %s, the %d-th matching %q", rel, s.cfg.CrashAfterFsync, s.cfg.CrashPath))
	}
	if err != nil {
		return syscall.EIO
	}
	return 0
}

// file is an open regular file: every read and write goes through the
// inode's overlay. It has no PassthroughFd, so the kernel cannot bypass it.
type file struct {
	s      *fsys
	ov     *inode
	direct bool // opened O_DIRECT
}

// misaligned reports an O_DIRECT request a device would refuse. The
// kernel's own writeback (a mapped page, pid 0) is not the application's
// O_DIRECT I/O and is not checked.
func (f *file) misaligned(ctx context.Context, off int64, n int) bool {
	a := f.s.cfg.DIOAlign
	if !f.direct || a <= 0 {
		return false
	}
	if c, ok := fuse.FromContext(ctx); ok && c.Pid == 0 {
		return false
	}
	return off%a != 0 || int64(n)%a != 0
}

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.s.enter()
	defer f.s.leave()
	if f.misaligned(ctx, off, len(dest)) {
		return nil, syscall.EINVAL
	}
	f.ov.mu.Lock()
	defer f.ov.mu.Unlock()
	m, err := f.ov.read(dest, off)
	if err != nil {
		f.s.log.Error("crashfs: read", "path", f.ov.path, "err", err)
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:m]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.s.enter()
	defer f.s.leave()
	if f.misaligned(ctx, off, len(data)) {
		return 0, syscall.EINVAL
	}
	f.ov.mu.Lock()
	defer f.ov.mu.Unlock()
	if err := f.ov.write(data, off); err != nil {
		f.s.log.Error("crashfs: write", "path", f.ov.path, "err", err)
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

// Fsync is what fsync, fdatasync, msync(MS_SYNC), an O_DSYNC/RWF_DSYNC
// write and an io_uring fsync become: the only way unsynced bytes reach
// the durable image.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.s.enter()
	f.ov.mu.Lock()
	err := f.ov.sync()
	rel := f.ov.path
	f.ov.mu.Unlock()
	crash := f.s.fsynced(rel)
	f.s.leave()
	if crash {
		f.s.crash(fmt.Sprintf("armed: FSYNC %s, the %d-th matching %q", rel, f.s.cfg.CrashAfterFsync, f.s.cfg.CrashPath))
	}
	if err != nil {
		f.s.log.Error("crashfs: fsync", "path", rel, "err", err)
		return syscall.EIO
	}
	return 0
}

func (f *file) Flush(ctx context.Context) syscall.Errno { return 0 }

func (f *file) Release(ctx context.Context) syscall.Errno { return 0 }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	f.s.enter()
	defer f.s.leave()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.ov.rw.Fd()), &st); err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	f.ov.mu.Lock()
	out.Size = uint64(f.ov.size)
	out.Blocks = (out.Size + 511) / 512
	f.ov.mu.Unlock()
	return 0
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f.s.enter()
	defer f.s.leave()
	f.ov.mu.Lock()
	defer f.ov.mu.Unlock()
	end := int64(off + size)
	keep := mode&unix.FALLOC_FL_KEEP_SIZE != 0
	switch mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0:
	case unix.FALLOC_FL_ZERO_RANGE:
		if err := f.ov.zero(int64(off), int64(size)); err != nil {
			return errno(err)
		}
	case unix.FALLOC_FL_PUNCH_HOLE:
		if !keep {
			return syscall.EINVAL
		}
		if err := f.ov.zero(int64(off), int64(size)); err != nil {
			return errno(err)
		}
	default:
		return syscall.EOPNOTSUPP
	}
	if !keep && end > f.ov.size {
		f.ov.size = end // the new bytes read as zero
	}
	return 0
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	f.s.enter()
	defer f.s.leave()
	f.ov.mu.Lock()
	defer f.ov.mu.Unlock()
	size := uint64(f.ov.size)
	if off >= size {
		return 0, syscall.ENXIO
	}
	switch whence {
	case unix.SEEK_DATA:
		return off, 0 // everything is data: allowed
	case unix.SEEK_HOLE:
		return size, 0
	}
	return 0, syscall.EINVAL
}

// mount mounts s on cfg.Mount.
func mount(s *fsys) (*fuse.Server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(s.cfg.Backing, &st); err != nil {
		return nil, fmt.Errorf("crashfs: backing: %w", err)
	}
	lr := &fs.LoopbackRoot{Path: s.cfg.Backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: lr}, s: s}
	lr.RootNode = root
	zero := time.Duration(0)
	opts := &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:               "crashfs",
			Name:                 "crashfs",
			AllowOther:           true,
			DirectMountStrict:    true,
			DisableReadDirPlus:   true,
			DisabledCapabilities: fuse.CAP_PASSTHROUGH | fuse.CAP_WRITEBACK_CACHE,
		},
	}
	server, err := fs.Mount(s.cfg.Mount, root, opts)
	if err != nil {
		return nil, fmt.Errorf("crashfs: mount %s: %w", s.cfg.Mount, err)
	}
	return server, nil
}
