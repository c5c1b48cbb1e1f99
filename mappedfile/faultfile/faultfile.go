// Package faultfile wraps a mappedfile.Backend so that the files it opens
// fail or slow down chosen operations (by kind, by path, n-th call, past an
// offset): the engine's tests use it to drive error paths through the store.
//
// It works at the MappedFile level and its failures are sticky by
// construction, so it proves nothing about a backend's own stickiness or
// durability: that is the job of the fault seam under the real backends
// (internal/segfile) and of the conformance suite's injection checks.
package faultfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// ErrInjected is the error of a rule that names none.
var ErrInjected = errors.New("faultfile: injected fault")

// Op is a kind of MappedFile operation a rule can hit.
type Op int

const (
	OpOpen Op = iota
	OpAppend
	OpCommit
	OpFlush
	OpRead
	OpSend
	OpTruncate
	numOps
)

func (o Op) String() string {
	return [...]string{"open", "append", "commit", "flush", "read", "send", "truncate"}[o]
}

// Fault is one injection rule.
type Fault struct {
	Op Op
	// Nth, when > 0, hits only the n-th operation of this kind (1-based,
	// counted over every file of the Faults that match PathContains).
	// 0 hits every matching operation.
	Nth int
	// PastOffset, when > 0, hits only operations whose byte range ends past
	// this global offset (FromOffset + position): "the disk is full from here".
	PastOffset int64
	// PathContains, when set, limits the rule to files whose path contains it.
	PathContains string
	// Err is the error returned (EIO, ENOSPC, …); nil with Latency > 0 only
	// delays; nil without Latency means ErrInjected.
	Err error
	// Latency is added before the operation (and before a failure).
	Latency time.Duration
}

// Faults is a set of rules shared by every file a Faulty backend opens.
// Rules may be added and cleared while files are in use.
type Faults struct {
	mu     sync.Mutex
	rules  []Fault
	counts [numOps]map[string]int // per rule PathContains
	hits   atomic.Int64
}

// NewFaults returns a rule set with the given rules.
func NewFaults(rules ...Fault) *Faults {
	f := &Faults{}
	for _, r := range rules {
		f.Add(r)
	}
	return f
}

// Add adds a rule.
func (f *Faults) Add(r Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, r)
}

// Clear removes every rule and resets the counters.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
	f.counts = [numOps]map[string]int{}
}

// Hits returns how many operations were failed or delayed so far.
func (f *Faults) Hits() int64 { return f.hits.Load() }

// check counts the operation and returns the latency to add and the error to
// return, if a rule hits it.
func (f *Faults) check(op Op, path string, globalEnd int64) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counts[op] == nil {
		f.counts[op] = make(map[string]int)
	}
	seen := map[string]bool{}
	var delay time.Duration
	var fail error
	for _, r := range f.rules {
		if r.Op != op || (r.PathContains != "" && !strings.Contains(path, r.PathContains)) {
			continue
		}
		if !seen[r.PathContains] {
			seen[r.PathContains] = true
			f.counts[op][r.PathContains]++
		}
		if r.Nth > 0 && f.counts[op][r.PathContains] != r.Nth {
			continue
		}
		if r.PastOffset > 0 && globalEnd <= r.PastOffset {
			continue
		}
		delay += r.Latency
		if fail == nil && (r.Err != nil || r.Latency == 0) {
			fail = r.Err
			if fail == nil {
				fail = ErrInjected
			}
		}
	}
	if delay > 0 || fail != nil {
		f.hits.Add(1)
	}
	return delay, fail
}

// Faulty wraps a mappedfile.Backend so that every file it opens obeys the rules.
type Faulty struct {
	inner  mappedfile.Backend
	faults *Faults
}

// NewFaulty wraps inner with the rule set faults.
func NewFaulty(inner mappedfile.Backend, faults *Faults) *Faulty {
	return &Faulty{inner: inner, faults: faults}
}

// Name implements mappedfile.Backend.
func (b *Faulty) Name() string { return b.inner.Name() }

// Open implements mappedfile.Backend.
func (b *Faulty) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	if err := inject(ctx, b.faults, OpOpen, spec.Path, spec.FromOffset); err != nil {
		return nil, fmt.Errorf("open %s: %w", spec.Path, err)
	}
	mf, err := b.inner.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return WrapFaulty(mf, b.faults), nil
}

// List implements mappedfile.Lister when the inner backend does.
func (b *Faulty) List(dir string) ([]string, error) {
	if l, ok := b.inner.(mappedfile.Lister); ok {
		return l.List(dir)
	}
	return nil, fmt.Errorf("list %s: backend %s keeps files in the OS file system: %w", dir, b.inner.Name(), mappedfile.ErrUnsupported)
}

// ListDirs implements mappedfile.DirLister when the inner backend does.
func (b *Faulty) ListDirs(dir string) ([]string, error) {
	if l, ok := b.inner.(mappedfile.DirLister); ok {
		return l.ListDirs(dir)
	}
	return nil, fmt.Errorf("list directories in %s: backend %s keeps files in the OS file system: %w", dir, b.inner.Name(), mappedfile.ErrUnsupported)
}

// Remove implements mappedfile.Lister when the inner backend does.
func (b *Faulty) Remove(path string) error {
	if l, ok := b.inner.(mappedfile.Lister); ok {
		return l.Remove(path)
	}
	return fmt.Errorf("remove %s: backend %s keeps files in the OS file system: %w", path, b.inner.Name(), mappedfile.ErrUnsupported)
}

// Inner returns the wrapped backend.
func (b *Faulty) Inner() mappedfile.Backend { return b.inner }

func inject(ctx context.Context, f *Faults, op Op, path string, globalEnd int64) error {
	delay, err := f.check(op, path, globalEnd)
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("injected %s fault: %w", op, err)
	}
	return nil
}

// faultyFile is a mappedfile.MappedFile wrapped by WrapFaulty.
type faultyFile struct {
	mappedfile.MappedFile
	faults    *Faults
	stickyErr atomic.Pointer[error]
}

// WrapFaulty wraps one file with the rule set. An injected failure of
// Append, Commit, Flush or Truncate is sticky, as a real one is: later
// Appends, Commits and Flushes return it.
func WrapFaulty(mf mappedfile.MappedFile, faults *Faults) mappedfile.MappedFile {
	return &faultyFile{MappedFile: mf, faults: faults}
}

func (f *faultyFile) sticky() error {
	if p := f.stickyErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *faultyFile) fail(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err // the caller gave up waiting: nothing failed
	}
	f.stickyErr.CompareAndSwap(nil, &err)
	return *f.stickyErr.Load()
}

func (f *faultyFile) Err() error {
	if err := f.sticky(); err != nil {
		return err
	}
	return f.MappedFile.Err()
}

func (f *faultyFile) Append(n int, enc mappedfile.Encoder) (int64, error) {
	if err := f.sticky(); err != nil {
		return 0, err
	}
	end := f.FromOffset() + f.WrotePosition() + int64(n)
	if err := inject(context.Background(), f.faults, OpAppend, f.Path(), end); err != nil {
		return 0, f.fail(fmt.Errorf("%s: append: %w", f.Path(), err))
	}
	return f.MappedFile.Append(n, enc)
}

func (f *faultyFile) Commit(ctx context.Context, leastPages int) (int64, error) {
	if err := f.sticky(); err != nil {
		return f.CommittedPosition(), err
	}
	end := f.FromOffset() + f.WrotePosition()
	if err := inject(ctx, f.faults, OpCommit, f.Path(), end); err != nil {
		return f.CommittedPosition(), f.fail(fmt.Errorf("%s: commit: %w", f.Path(), err))
	}
	return f.MappedFile.Commit(ctx, leastPages)
}

func (f *faultyFile) Flush(ctx context.Context, leastPages int) (int64, error) {
	if err := f.sticky(); err != nil {
		return f.FlushedPosition(), err
	}
	end := f.FromOffset() + f.CommittedPosition()
	if err := inject(ctx, f.faults, OpFlush, f.Path(), end); err != nil {
		return f.FlushedPosition(), f.fail(fmt.Errorf("%s: flush: %w", f.Path(), err))
	}
	return f.MappedFile.Flush(ctx, leastPages)
}

func (f *faultyFile) ReadAt(dst []byte, filePos int64) (int, error) {
	end := f.FromOffset() + filePos + int64(len(dst))
	if err := inject(context.Background(), f.faults, OpRead, f.Path(), end); err != nil {
		return 0, fmt.Errorf("%s: read: %w", f.Path(), err)
	}
	return f.MappedFile.ReadAt(dst, filePos)
}

func (f *faultyFile) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if err := inject(ctx, f.faults, OpSend, f.Path(), f.FromOffset()+filePos+n); err != nil {
		return 0, fmt.Errorf("%s: send: %w", f.Path(), err)
	}
	return f.MappedFile.SendRange(ctx, w, filePos, n)
}

func (f *faultyFile) Truncate(ctx context.Context, validEnd int64) error {
	if err := inject(ctx, f.faults, OpTruncate, f.Path(), f.FromOffset()+validEnd); err != nil {
		return f.fail(fmt.Errorf("%s: truncate: %w", f.Path(), err))
	}
	return f.MappedFile.Truncate(ctx, validEnd)
}

// WriteAt forwards to the wrapped file when it is a mappedfile.Overwriter; it counts
// as an append for fault injection.
func (f *faultyFile) WriteAt(p []byte, filePos int64) (int, error) {
	ow, err := f.beginOverwrite(filePos, len(p))
	if err != nil {
		return 0, err
	}
	return ow.WriteAt(p, filePos)
}

// SwapEach forwards to the wrapped file as WriteAt does, the fields' end
// counting as the overwrite's.
func (f *faultyFile) SwapEach(p, old []byte, width int, filePos []int64) error {
	if len(filePos) == 0 { // nothing to overwrite: no fault to inject
		ow, ok := f.MappedFile.(mappedfile.Overwriter)
		if !ok {
			return fmt.Errorf("%s: overwrite: %w", f.Path(), mappedfile.ErrUnsupported)
		}
		if err := f.sticky(); err != nil {
			return err
		}
		return ow.SwapEach(p, old, width, filePos)
	}
	end := int64(0)
	for _, pos := range filePos {
		end = max(end, pos)
	}
	ow, err := f.beginOverwrite(end, width)
	if err != nil {
		return err
	}
	return ow.SwapEach(p, old, width, filePos)
}

// beginOverwrite returns the wrapped file's Overwriter for an overwrite of
// n bytes at filePos, after the sticky error and the append faults.
func (f *faultyFile) beginOverwrite(filePos int64, n int) (mappedfile.Overwriter, error) {
	ow, ok := f.MappedFile.(mappedfile.Overwriter)
	if !ok {
		return nil, fmt.Errorf("%s: overwrite: %w", f.Path(), mappedfile.ErrUnsupported)
	}
	if err := f.sticky(); err != nil {
		return nil, err
	}
	if err := inject(context.Background(), f.faults, OpAppend, f.Path(), f.FromOffset()+filePos+int64(n)); err != nil {
		return nil, f.fail(fmt.Errorf("%s: overwrite: %w", f.Path(), err))
	}
	return ow, nil
}

// Unwrap returns the wrapped file.
func (f *faultyFile) Unwrap() mappedfile.MappedFile { return f.MappedFile }

// Warm warms the wrapped file when it is a mappedfile.Warmer.
func (f *faultyFile) Warm(ctx context.Context, opts mappedfile.WarmOptions) error {
	return mappedfile.Warm(ctx, f.MappedFile, opts)
}

// Cool cools the wrapped file when it is a mappedfile.Warmer.
func (f *faultyFile) Cool() error { return mappedfile.Cool(f.MappedFile) }
