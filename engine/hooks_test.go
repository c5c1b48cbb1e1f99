package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/mqstore/mqstore/mappedfile"
)

// hooked wraps a real backend (a MemFS, mmap) so that a test can block or
// fail chosen operations of chosen files: a gate a test opens, an error a
// real system returns (ENOSPC, an mlock refused). Every operation it lets
// through is the wrapped backend's own. Inner lets the engine find the
// wrapped backend's file system (storefs.Of).
type hooked struct {
	inner mappedfile.Backend
	hooks
}

// hookFunc runs before an operation on the file at path; an error fails the
// operation with it.
type hookFunc func(op, path string) error

type hooks struct {
	fn atomic.Pointer[hookFunc]
}

// set installs fn (nil removes it).
func (h *hooks) set(fn hookFunc) {
	if fn == nil {
		h.fn.Store(nil)
		return
	}
	h.fn.Store(&fn)
}

func (h *hooks) run(op, path string) error {
	if p := h.fn.Load(); p != nil {
		return (*p)(op, path)
	}
	return nil
}

// on returns a hook that calls fn for operation op on files whose path
// contains part, and lets everything else through.
func on(op, part string, fn func(path string) error) hookFunc {
	return func(o, path string) error {
		if o == op && strings.Contains(path, part) {
			return fn(path)
		}
		return nil
	}
}

func newHooked(inner mappedfile.Backend) *hooked { return &hooked{inner: inner} }

func (h *hooked) Name() string              { return h.inner.Name() }
func (h *hooked) Inner() mappedfile.Backend { return h.inner }
func (h *hooked) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	if err := h.run("open", spec.Path); err != nil {
		return nil, fmt.Errorf("open %s: %w", spec.Path, err)
	}
	mf, err := h.inner.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &hookedFile{MappedFile: mf, h: h}, nil
}

type hookedFile struct {
	mappedfile.MappedFile
	h *hooked
}

func (f *hookedFile) Warm(ctx context.Context, opts mappedfile.WarmOptions) error {
	if err := f.h.run("warm", f.Path()); err != nil {
		return fmt.Errorf("warm %s: %w", f.Path(), err)
	}
	return mappedfile.Warm(ctx, f.MappedFile, opts)
}

func (f *hookedFile) Cool() error { return mappedfile.Cool(f.MappedFile) }

func (f *hookedFile) Flush(ctx context.Context, leastPages int) (int64, error) {
	if err := f.h.run("flush", f.Path()); err != nil {
		return f.FlushedPosition(), fmt.Errorf("flush %s: %w", f.Path(), err)
	}
	return f.MappedFile.Flush(ctx, leastPages)
}

func (f *hookedFile) ReadAt(dst []byte, filePos int64) (int, error) {
	if err := f.h.run("read", f.Path()); err != nil {
		return 0, fmt.Errorf("read %s: %w", f.Path(), err)
	}
	return f.MappedFile.ReadAt(dst, filePos)
}

func (f *hookedFile) Delete() error {
	if err := f.h.run("delete", f.Path()); err != nil {
		return fmt.Errorf("delete %s: %w", f.Path(), err)
	}
	return f.MappedFile.Delete()
}

// WriteAt forwards to the wrapped file (index files overwrite their slots).
func (f *hookedFile) WriteAt(p []byte, filePos int64) (int, error) {
	ow, ok := f.MappedFile.(mappedfile.Overwriter)
	if !ok {
		return 0, fmt.Errorf("%s: overwrite: %w", f.Path(), mappedfile.ErrUnsupported)
	}
	return ow.WriteAt(p, filePos)
}

// SwapEach forwards to the wrapped file, as WriteAt, after the "overwrite"
// hook (every key the index puts swaps slots with one SwapEach).
func (f *hookedFile) SwapEach(p, old []byte, width int, filePos []int64) error {
	if err := f.h.run("overwrite", f.Path()); err != nil {
		return fmt.Errorf("overwrite %s: %w", f.Path(), err)
	}
	ow, ok := f.MappedFile.(mappedfile.Overwriter)
	if !ok {
		return fmt.Errorf("%s: overwrite: %w", f.Path(), mappedfile.ErrUnsupported)
	}
	return ow.SwapEach(p, old, width, filePos)
}
