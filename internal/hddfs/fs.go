//go:build linux

package hddfs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ImageName is the one file of the mount: the disk.
const ImageName = "disk.img"

// drive is the served disk: the model, the clock it runs on and the
// backing file that holds the bytes. Data is written to the backing file
// when the request arrives (the write cache is a timing model only: the
// emulator is for speed, not for power loss).
type drive struct {
	mu      sync.Mutex
	disk    *Disk
	epoch   time.Time
	backing *backing
	size    int64
	log     *slog.Logger
	// What the daemon adds to the model: requests answered after their
	// time, by how much in all and at most (the machine's load, the timer).
	answered      int64
	late, maxLate time.Duration
}

// DaemonStats is what the daemon reports in StatsName: the model's
// counters and how late the daemon answered compared with the model.
type DaemonStats struct {
	Disk Stats
	// Answered is the requests that waited for the model's time; Late the
	// sum of how much later than it they were answered, MaxLate the most.
	// A request whose time had passed when the daemon got to it is not
	// counted, so Late is a lower bound.
	Answered      int64
	Late, MaxLate time.Duration
}

// StatsName is the read-only file beside the image with the daemon's
// DaemonStats as JSON.
const StatsName = "stats.json"

// serve applies op to the model at the request's arrival and waits until
// the time the model says the drive answers (or the request is
// interrupted).
func (d *drive) serve(ctx context.Context, op func(now time.Duration) time.Duration) syscall.Errno {
	d.mu.Lock()
	end := op(time.Since(d.epoch))
	d.mu.Unlock()
	wait := end - time.Since(d.epoch)
	if wait <= 0 {
		return 0
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		late := time.Since(d.epoch) - end
		d.mu.Lock()
		d.answered++
		d.late += late
		d.maxLate = max(d.maxLate, late)
		d.mu.Unlock()
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

func (d *drive) stats() DaemonStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DaemonStats{Disk: d.disk.Stats(), Answered: d.answered, Late: d.late, MaxLate: d.maxLate}
}

type root struct {
	fs.Inode
	d *drive
}

var _ fs.NodeOnAdder = (*root)(nil)

func (r *root) OnAdd(ctx context.Context) {
	ch := r.NewPersistentInode(ctx, &image{d: r.d}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	r.AddChild(ImageName, ch, false)
	st := r.NewPersistentInode(ctx, &statsFile{d: r.d}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 3})
	r.AddChild(StatsName, st, false)
}

// statsFile shows DaemonStats, rendered at each read.
type statsFile struct {
	fs.Inode
	d *drive
}

var (
	_ fs.NodeOpener    = (*statsFile)(nil)
	_ fs.NodeReader    = (*statsFile)(nil)
	_ fs.NodeGetattrer = (*statsFile)(nil)
)

func (f *statsFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EACCES
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *statsFile) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, err := json.Marshal(f.d.stats())
	if err != nil {
		return nil, syscall.EIO
	}
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(b[off:min(int64(len(b)), off+int64(len(dest)))]), 0
}

func (f *statsFile) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = 4096 // an upper bound; reads end at the JSON's end (direct I/O)
	out.Nlink = 1
	return 0
}

// ReadDaemonStats reads the daemon's counters from the FUSE mount at dir.
func ReadDaemonStats(dir string) (DaemonStats, error) {
	var s DaemonStats
	b, err := os.ReadFile(filepath.Join(dir, StatsName))
	if err != nil {
		return s, fmt.Errorf("hddfs: daemon stats: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("hddfs: daemon stats %q: %w", b, err)
	}
	return s, nil
}

// image is the disk file: fixed size, every read and write through the
// model, FSYNC a cache flush. Opened with FOPEN_DIRECT_IO so that the
// kernel keeps no page cache of it (the loop device above has its own
// file system's cache, as a disk would).
type image struct {
	fs.Inode
	d *drive
}

var (
	_ fs.NodeOpener    = (*image)(nil)
	_ fs.NodeReader    = (*image)(nil)
	_ fs.NodeWriter    = (*image)(nil)
	_ fs.NodeFsyncer   = (*image)(nil)
	_ fs.NodeFlusher   = (*image)(nil)
	_ fs.NodeGetattrer = (*image)(nil)
	_ fs.NodeSetattrer = (*image)(nil)
	_ fs.NodeAllocater = (*image)(nil)
)

func (f *image) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

// clip limits [off, off+n) to the disk; a request past its end is refused.
func (f *image) clip(off int64, n int) (int, syscall.Errno) {
	if off < 0 || off > f.d.size {
		return 0, syscall.EINVAL
	}
	return int(min(int64(n), f.d.size-off)), 0
}

func (f *image) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, errno := f.clip(off, len(dest))
	if errno != 0 || n == 0 {
		return fuse.ReadResultData(nil), errno
	}
	if errno := f.d.serve(ctx, func(now time.Duration) time.Duration { return f.d.disk.Read(now, off, int64(n)) }); errno != 0 {
		return nil, errno
	}
	m, err := f.d.backing.ReadAt(dest[:n], off)
	if err != nil && m < n {
		f.d.log.Error("hddfs: read the backing file", "off", off, "len", n, "err", err)
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:m]), 0
}

func (f *image) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	n, errno := f.clip(off, len(data))
	if errno != 0 {
		return 0, errno
	}
	if n < len(data) {
		return 0, syscall.ENOSPC // a disk does not grow
	}
	if _, err := f.d.backing.WriteAt(data, off); err != nil {
		f.d.log.Error("hddfs: write the backing file", "off", off, "len", n, "err", err)
		return 0, syscall.EIO
	}
	if errno := f.d.serve(ctx, func(now time.Duration) time.Duration { return f.d.disk.Write(now, off, int64(n)) }); errno != 0 {
		return 0, errno
	}
	return uint32(n), 0
}

// Fsync is the drive's cache flush: the loop device turns a flush request
// (ext4's barrier, an fdatasync reaching the device) into it. The backing
// file itself is not synced: the emulator stands for the disk's speed, and
// the host's own disk must not add its latency.
func (f *image) Fsync(ctx context.Context, _ fs.FileHandle, flags uint32) syscall.Errno {
	return f.d.serve(ctx, f.d.disk.Flush)
}

// Flush is close(2), not a cache flush: nothing to do.
func (f *image) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno { return 0 }

func (f *image) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	out.Size = uint64(f.d.size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 4096
	out.Nlink = 1
	return 0
}

// Setattr accepts what does not change the disk (times, mode); a new size
// is refused.
func (f *image) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != f.d.size {
		return syscall.EPERM
	}
	return f.Getattr(ctx, fh, out)
}

// Allocate is refused: a rotating disk has no discard, and the image is
// fixed in size.
func (f *image) Allocate(ctx context.Context, _ fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

// mountDrive mounts the disk at dir.
func mountDrive(dir string, d *drive) (*fuse.Server, error) {
	sec := time.Second
	opts := &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			FsName:               "hddfs",
			Name:                 "hddfs",
			AllowOther:           true,
			DirectMountStrict:    true,
			MaxWrite:             1 << 20,
			DisableReadDirPlus:   true,
			DisabledCapabilities: fuse.CAP_PASSTHROUGH | fuse.CAP_WRITEBACK_CACHE,
		},
	}
	server, err := fs.Mount(dir, &root{d: d}, opts)
	if err != nil {
		return nil, fmt.Errorf("hddfs: mount %s: %w", dir, err)
	}
	return server, nil
}
