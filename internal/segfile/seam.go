package segfile

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// The seam: every system call the backends make on their files that
// changes them — pwrite, fdatasync, fsync, msync, fallocate, ftruncate,
// sync_file_range, create, rename, unlink and the fsync of a directory —
// goes through run (reads and lseek do not), which hands it to a Hook when
// one is installed for the file's directory (pebble's errorfs, one level
// down: under the backends rather than under the engine). Tests install an
// injector that records the operations in order and fails chosen ones;
// io_uring requests, which do not go through these functions, are reported
// with Begin and End.
//
// Production cost: one atomic pointer load per system call, which finds nil
// (no hook was ever installed) and calls the system call directly. A build
// tag would make it exactly zero, but then the durability tests would run
// against a different build than the one users run, and `go test ./...`
// would need the tag to prove anything; a load next to a system call that
// takes microseconds costs nothing measurable, and nothing on the append
// path makes a system call.

// OpKind is the kind of an operation the seam sees.
type OpKind uint8

const (
	OpCreate       OpKind = iota + 1 // open(O_CREAT) of Path
	OpPwrite                         // write [Offset, Offset+Length) (not durable by itself)
	OpWriteDurable                   // a write durable on completion (O_DSYNC / RWF_DSYNC)
	OpFdatasync                      // fdatasync of Path
	OpFsync                          // fsync of Path
	OpMsync                          // msync(MS_SYNC) of [Offset, Offset+Length) of Path's mapping
	OpFallocate                      // fallocate [Offset, Offset+Length), mode Mode
	OpFtruncate                      // ftruncate to Length
	OpRename                         // rename Path → NewPath
	OpRemove                         // unlink Path
	OpSyncDir                        // fsync of the directory Path
	OpWriteback                      // sync_file_range of [Offset, Offset+Length): paces writeback, not durable
)

func (k OpKind) String() string {
	names := [...]string{"?", "create", "pwrite", "durable-write", "fdatasync", "fsync", "msync", "fallocate", "ftruncate", "rename", "unlink", "fsync-dir", "sync_file_range"}
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one operation on a file.
type Op struct {
	Kind OpKind
	// Path is the file (the directory for OpSyncDir); NewPath the
	// destination of OpRename.
	Path, NewPath string
	// Offset and Length: the byte range of OpPwrite, OpWriteDurable,
	// OpMsync, OpFallocate and OpWriteback; Length is the size of
	// OpFtruncate.
	Offset, Length int64
	// Mode is fallocate's mode.
	Mode uint32
	// Via names the path the operation took when it was not a system call
	// of this package ("io_uring").
	Via string
}

// Name is the operation as a message would name it ("pwrite", "io_uring fdatasync").
func (o Op) Name() string {
	if o.Via != "" {
		return o.Via + " " + o.Kind.String()
	}
	return o.Kind.String()
}

// Hook sees the operations on files under the directory it was installed
// for. Its methods may be called from many goroutines at once.
type Hook interface {
	// Before is called before op is issued. A non-nil error fails op: it is
	// not issued and the caller gets the error as if the kernel had returned
	// it (an errno such as syscall.EIO; EINTR exercises the retry).
	Before(op Op) error
	// After is called once op returned, with its result (Before's error
	// included).
	After(op Op, err error)
}

type installed struct {
	dir  string // cleaned, without a trailing separator
	hook Hook
	id   uint64 // tells installations apart for uninstall
}

var (
	hooks     atomic.Pointer[[]installed] // nil while no hook is installed
	installMu sync.Mutex
	lastID    uint64 // under installMu
)

// Install routes the operations on paths under dir (and on dir itself)
// through h until the returned function is called. Several hooks may be
// installed for disjoint directories at once (tests in parallel); for
// nested ones the first installed wins.
func Install(dir string, h Hook) (uninstall func()) {
	dir = filepath.Clean(dir)
	installMu.Lock()
	defer installMu.Unlock()
	var list []installed
	if cur := hooks.Load(); cur != nil {
		list = append(list, *cur...)
	}
	lastID++
	id := lastID
	list = append(list, installed{dir: dir, hook: h, id: id})
	hooks.Store(&list)
	var once sync.Once
	return func() {
		once.Do(func() {
			installMu.Lock()
			defer installMu.Unlock()
			cur := *hooks.Load()
			var rest []installed
			for _, in := range cur {
				if in.id != id {
					rest = append(rest, in)
				}
			}
			if len(rest) == 0 {
				hooks.Store(nil)
			} else {
				hooks.Store(&rest)
			}
		})
	}
}

// hookFor returns the hook installed for path, or nil.
func hookFor(path string) Hook {
	list := hooks.Load()
	if list == nil {
		return nil
	}
	for _, in := range *list {
		if path == in.dir || strings.HasPrefix(path, in.dir) && len(path) > len(in.dir) && path[len(in.dir)] == filepath.Separator {
			return in.hook
		}
	}
	return nil
}

// run issues op through the hook of its path, if any.
func run(op Op, issue func() error) error {
	if hooks.Load() == nil {
		return issue()
	}
	h := hookFor(op.Path)
	if h == nil {
		return issue()
	}
	err := h.Before(op)
	if err == nil {
		err = issue()
	}
	h.After(op, err)
	return err
}

// Begin reports an operation about to be issued by another path than this
// package's system calls (an io_uring request, with Via "io_uring"). A
// non-nil error means: do not issue it, complete it with that error. Call End
// with the result either way.
func Begin(op Op) error {
	if hooks.Load() == nil {
		return nil
	}
	if h := hookFor(op.Path); h != nil {
		return h.Before(op)
	}
	return nil
}

// End reports the result of an operation reported with Begin.
func End(op Op, err error) {
	if hooks.Load() == nil {
		return
	}
	if h := hookFor(op.Path); h != nil {
		h.After(op, err)
	}
}
