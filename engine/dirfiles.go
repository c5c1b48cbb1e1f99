package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mqstore/mqstore/engine/storefs"
)

// The files at the root of a store directory (docs/formats.md "Directory"). The
// lock file is a real file in the OS whatever the backend (the lock is about
// processes: flock on Unix, LockFileEx on Windows); the others go through the store's storefs.FS, so an in-memory
// store's crash model covers them too.
const (
	lockFileName       = "lock"
	abortFileName      = "abort"
	checkpointFileName = "checkpoint"
	paramsFileName     = "mqstore.json"
	commitLogDirName   = "commitlog"
	checkpointSize     = 4096
)

// dirLock is the flock'd lock file: one process has a store open.
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := lockFile(f); err != nil {
		holder := "unknown"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, errLockHeld) {
			return nil, fmt.Errorf("store %s is open elsewhere (lock held by %s): %w", dir, holder, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := unlockFile(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// checkpoint is RocketMQ's StoreCheckpoint: the store timestamps known
// flushed in the CommitLog, the ConsumeQueues and the IndexFiles.
//
// Bytes 24–39 are mqstore's extension (the file is 4096 bytes and RocketMQ
// reads only the first 24): at 24 the CommitLog offset known flushed when
// the checkpoint was written — recovery uses it to tell a torn tail (past
// it, after a crash) from corruption of data that was durable (before it);
// at 32 the CommitLog offset below which every record's ConsumeQueue unit
// and index entries were durable — recovery after a crash scans from the
// segment holding it, whatever the clock did. 0 means unknown.
type checkpoint struct {
	fs            storefs.FS
	path          string
	physic        atomic.Int64
	logics        atomic.Int64
	index         atomic.Int64
	flushedOffset atomic.Int64
	logicsOffset  atomic.Int64
	existed       bool
}

func loadCheckpoint(fsys storefs.FS, dir string) (*checkpoint, error) {
	c := &checkpoint{fs: fsys, path: filepath.Join(dir, checkpointFileName)}
	b, err := fsys.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("checkpoint %s has %d bytes, want %d: %w", c.path, len(b), checkpointSize, ErrCorrupt)
	}
	c.existed = true
	c.physic.Store(int64(binary.BigEndian.Uint64(b[0:])))
	c.logics.Store(int64(binary.BigEndian.Uint64(b[8:])))
	c.index.Store(int64(binary.BigEndian.Uint64(b[16:])))
	if len(b) >= 32 {
		c.flushedOffset.Store(int64(binary.BigEndian.Uint64(b[24:])))
	}
	if len(b) >= 40 {
		c.logicsOffset.Store(int64(binary.BigEndian.Uint64(b[32:])))
	}
	return c, nil
}

func (c *checkpoint) setPhysic(ts int64) { raise(&c.physic, ts) }
func (c *checkpoint) setLogics(ts int64) { raise(&c.logics, ts) }
func (c *checkpoint) setIndex(ts int64)  { raise(&c.index, ts) }

// raise stores v in a if it is larger.
func raise(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// write stores the checkpoint durably (write a temporary file, fsync, rename).
func (c *checkpoint) write() error {
	b := make([]byte, checkpointSize)
	binary.BigEndian.PutUint64(b[0:], uint64(c.physic.Load()))
	binary.BigEndian.PutUint64(b[8:], uint64(c.logics.Load()))
	binary.BigEndian.PutUint64(b[16:], uint64(c.index.Load()))
	binary.BigEndian.PutUint64(b[24:], uint64(c.flushedOffset.Load()))
	binary.BigEndian.PutUint64(b[32:], uint64(c.logicsOffset.Load()))
	return storefs.WriteFileAtomic(c.fs, c.path, b)
}

// storeParams are the parameters a store was created with; reopening with
// different ones is an error (docs/formats.md: sizes are options, recorded).
type storeParams struct {
	FormatVersion        int   `json:"formatVersion"`
	SegmentSizeBytes     int64 `json:"commitLogSegmentSizeBytes"`
	MaxMessageSizeBytes  int   `json:"maxMessageSizeBytes"`
	ConsumeQueueFileSize int64 `json:"consumeQueueFileSizeBytes"`
	IndexSlotCount       int   `json:"indexSlotCount"`
	IndexMaxEntries      int   `json:"indexMaxEntries"`

	isNew bool // not written yet
}

// writeParams records the parameters of a new store.
func writeParams(fsys storefs.FS, dir string, p storeParams) error {
	out, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return storefs.WriteFileAtomic(fsys, filepath.Join(dir, paramsFileName), append(out, '\n'))
}

const formatVersion = 1

// reconcileParams reads the recorded parameters (a new store gets them from
// the options, newStoreParams; the caller writes them once the options are
// valid) and resolves o with them (withStoreParams). A recorded parameter
// that is set in o (not zero) and differs is ErrConfigMismatch naming it.
func reconcileParams(fsys storefs.FS, dir string, o *Options) (storeParams, error) {
	path := filepath.Join(dir, paramsFileName)
	b, err := fsys.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		p := o.newStoreParams()
		o.withStoreParams(p)
		return p, nil
	}
	if err != nil {
		return storeParams{}, fmt.Errorf("read store parameters: %w", err)
	}
	var p storeParams
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("store parameters %s: %v: %w", path, err, ErrCorrupt)
	}
	if p.FormatVersion != formatVersion {
		return p, fmt.Errorf("store parameters %s: format version %d, this build reads %d: %w", path, p.FormatVersion, formatVersion, ErrConfigMismatch)
	}
	if o.SegmentSizeBytes != 0 && o.SegmentSizeBytes != p.SegmentSizeBytes {
		return p, fmt.Errorf("store %s was created with CommitLog segments of %d bytes, opened with %d: %w",
			dir, p.SegmentSizeBytes, o.SegmentSizeBytes, ErrConfigMismatch)
	}
	for _, c := range []struct {
		name     string
		opt      *int64
		recorded int64
	}{
		{"ConsumeQueue files of", &o.ConsumeQueueFileSizeBytes, p.ConsumeQueueFileSize},
	} {
		if *c.opt != 0 && *c.opt != c.recorded {
			return p, fmt.Errorf("store %s was created with %s %d bytes, opened with %d: %w", dir, c.name, c.recorded, *c.opt, ErrConfigMismatch)
		}
	}
	for _, c := range []struct {
		name     string
		opt      *int
		recorded int
	}{
		{"index slot count", &o.IndexSlotCount, p.IndexSlotCount},
		{"index max entries", &o.IndexMaxEntries, p.IndexMaxEntries},
	} {
		if *c.opt != 0 && *c.opt != c.recorded {
			return p, fmt.Errorf("store %s was created with %s %d, opened with %d: %w", dir, c.name, c.recorded, *c.opt, ErrConfigMismatch)
		}
	}
	o.withStoreParams(p)
	return p, nil
}
