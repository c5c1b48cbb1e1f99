package conformance

import (
	"fmt"
	"testing"
)

// Kind classifies an operation a backend issued below its files, as far as
// the durability and stickiness checks care.
type Kind int

const (
	// KindWrite hands bytes [Offset, Offset+Length) to the file without
	// making them durable: pwrite(2), an io_uring WRITE.
	KindWrite Kind = iota + 1
	// KindWriteDurable is a write that is durable when it completes
	// (O_DSYNC, RWF_DSYNC, a FUA write): a write and a sync of its range.
	KindWriteDurable
	// KindSync makes the whole file's data durable: fdatasync, fsync, an
	// io_uring FSYNC.
	KindSync
	// KindSyncRange makes [Offset, Offset+Length) durable: msync(MS_SYNC).
	KindSyncRange
	// KindAllocate is fallocate(2) of [Offset, Offset+Length) (reserving or
	// zeroing space), or ftruncate(2) to Length.
	KindAllocate
	// KindCreate creates Path (open with O_CREAT).
	KindCreate
	// KindRename renames Path to NewPath.
	KindRename
	// KindRemove unlinks Path.
	KindRemove
	// KindSyncDir fsyncs the directory Path (makes creates, renames and
	// removes in it durable).
	KindSyncDir
	// KindOther is anything else the injector reports.
	KindOther
)

func (k Kind) String() string {
	names := [...]string{"?", "write", "durable-write", "sync", "sync-range", "allocate", "create", "rename", "remove", "sync-dir", "other"}
	if k > 0 && int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// isSync reports whether an operation of this kind makes data durable.
func (k Kind) isSync() bool {
	return k == KindSync || k == KindSyncRange || k == KindWriteDurable
}

// isWrite reports whether an operation of this kind hands data to the file.
func (k Kind) isWrite() bool { return k == KindWrite || k == KindWriteDurable }

// Op is one operation as the injector saw it.
type Op struct {
	Kind Kind
	// Name is what it was, for messages: "pwrite", "fdatasync", "msync",
	// "io_uring WRITE_FIXED", …
	Name string
	// Path is the file (the directory for KindSyncDir); NewPath the
	// destination of a rename.
	Path, NewPath string
	// Offset and Length: the byte range, for the kinds that have one.
	Offset, Length int64
	// Err is the operation's result: nil, the injected error, or the real one.
	Err error
}

func (o Op) String() string {
	s := fmt.Sprintf("%s(%s", o.Name, o.Path)
	if o.NewPath != "" {
		s += " → " + o.NewPath
	}
	if o.Kind == KindWrite || o.Kind == KindWriteDurable || o.Kind == KindSyncRange || o.Kind == KindAllocate {
		s += fmt.Sprintf(" [%d,%d)", o.Offset, o.Offset+o.Length)
	}
	s += ")"
	if o.Err != nil {
		s += " = " + o.Err.Error()
	}
	return s
}

// Injector sees the I/O a backend issues below its files and can fail it —
// the system calls and, for io_uring, the ring's requests. It is what lets
// the suite prove durability and stickiness on the real backend, not through
// a wrapper: pebble's errorfs, one level down.
//
// An injector is made per check for the check's directory (NewInjector) and
// sees only operations on paths under it, so checks can run in parallel.
type Injector interface {
	// Ops returns the operations issued so far on paths under the
	// directory, in the order they were issued (a failed one included, with
	// its Err).
	Ops() []Op
	// FailNext makes the next operation on path whose kind is one of kinds
	// fail with err without reaching the file (the caller sees err as if the
	// kernel had returned it); later operations are not failed.
	FailNext(path string, err error, kinds ...Kind)
}

// NewInjector makes an injector for the files under dir. It must stop
// seeing operations when t ends.
type NewInjector func(t testing.TB, dir string) Injector

// Option configures Run.
type Option func(*config)

type config struct {
	injector NewInjector
}

// WithInjector gives the suite an injector for the backend's I/O; with it
// Run adds the durability and stickiness checks (see Run). Every backend
// that writes to a disk should pass one.
func WithInjector(newInjector NewInjector) Option {
	return func(c *config) { c.injector = newInjector }
}
