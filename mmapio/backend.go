// Package mmapio is mqstore's mmap backend, RocketMQ's default MappedFile:
// each segment is mapped MAP_SHARED read-write as a whole, records are encoded
// straight into the mapping, Commit is a no-op (the mapping is the page
// cache), Flush is msync(MS_SYNC) of the dirty page range, reads copy from the
// mapping and SendRange uses sendfile(2) from the page cache. Files also
// implement mappedfile.Overwriter (WriteAt rewrites appended bytes in place;
// the next Flush syncs them, wherever they lie).
//
// Memory faults (SIGBUS) on the mapping — the file truncated by another
// process, or an I/O error while a page is read in — do not crash the
// process: Append, WriteAt, ReadAt, SendRange and Warm turn them into errors
// that wrap ErrFault (sticky for Append, WriteAt and Warm, like any failed
// write).
package mmapio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// ErrFault is wrapped by the error of an operation that took a memory fault
// on the mapping (the file was shrunk under it, or a page could not be read).
var ErrFault = errors.New("mmapio: memory fault on the mapping")

// Options configure the backend. The zero value is ready to use.
type Options struct {
	// Logger receives errors that cannot be returned to a caller: an munmap
	// or close that fails when the last reader releases a closed segment.
	// Nil means slog.Default(). Not recorded (a run.json has no logger).
	Logger *slog.Logger `json:"-"`
	// TouchByWriting makes Warm's Touch write a zero byte into every page, as
	// RocketMQ's warmMappedFile does, instead of madvise(MADV_POPULATE_WRITE)
	// (Linux 5.14+), which faults the same pages in writable without storing
	// anything, with one system call per chunk, and so cannot race with an
	// Append. Kernels without MADV_POPULATE_WRITE fall back to writing anyway.
	TouchByWriting bool `json:"touchByWriting,omitempty"`
}

// New returns the mmap backend.
func New(opts Options) mappedfile.Backend {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &backend{opts: opts}
}

type backend struct {
	opts   Options
	locked atomic.Int64 // bytes of mappings mlocked now
}

// LockedBytes implements mappedfile.LockReporter.
func (b *backend) LockedBytes() int64 { return b.locked.Load() }

// Name implements mappedfile.Backend.
func (*backend) Name() string { return Name }

// Open implements mappedfile.Backend: it opens or creates (preallocated,
// under a temporary name, synced and renamed) spec.Path and maps all of it.
// A new file starts with every position at 0; an existing one with every
// position at SizeBytes, until recovery calls Truncate.
func (b *backend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	if spec.Path == "" || spec.FromOffset < 0 {
		return nil, fmt.Errorf("mmapio: open %q from offset %d: %w", spec.Path, spec.FromOffset, mappedfile.ErrInvalidArgument)
	}
	if int64(int(spec.SizeBytes)) != spec.SizeBytes {
		return nil, fmt.Errorf("mmapio: open %s: %d bytes do not fit in the address space: %w",
			spec.Path, spec.SizeBytes, mappedfile.ErrInvalidArgument)
	}
	osFile, existed, err := segfile.OpenOrCreate(ctx, spec, 0)
	if err != nil {
		return nil, fmt.Errorf("mmapio: %w", err)
	}
	mapping, err := segfile.Map(osFile, spec.SizeBytes, true)
	if err != nil {
		osFile.Close()
		return nil, fmt.Errorf("mmapio: %w", err)
	}
	if spec.HugePages {
		if err := segfile.AdviseHuge(mapping); err != nil {
			_ = segfile.Unmap(mapping)
			osFile.Close()
			return nil, fmt.Errorf("mmapio: open %s: %w", spec.Path, err)
		}
	}
	if spec.RandomAccess {
		if err := segfile.AdviseRandom(mapping); err != nil {
			_ = segfile.Unmap(mapping)
			osFile.Close()
			return nil, fmt.Errorf("mmapio: open %s: %w", spec.Path, err)
		}
	}
	m := &file{
		osFile:    osFile,
		mapping:   mapping,
		opts:      &b.opts,
		lockedSum: &b.locked,
	}
	m.writeAhead.Store(spec.WriteAhead)
	m.Init(mappedfile.BaseConfig{
		Spec: spec, Backend: "mmapio", Existed: existed,
		Semantics: mappedfile.Semantics{WriteThrough: true, ReadableUpToWrote: true},
		Cleanup:   m.cleanup, Remove: m.remove, Logger: b.opts.Logger,
	})
	m.overwrittenFrom.Store(noOverwrite)
	// Only a file made here with unwritten extents: a fault into written
	// ones (a prewritten file, a recycled one, one that existed) reads
	// them, and the kernel's readahead there made small folios anyway.
	if spec.SmallFolios && !existed && !spec.Prewrite && spec.RecycleFrom == "" {
		m.adviseWriting()
	}
	return m, nil
}
