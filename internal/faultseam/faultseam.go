// Package faultseam is the test side of internal/segfile's seam: an
// Injector, installed for one directory, records every operation the
// backends issue on files under it (in order, with offsets, lengths and
// results) and fails chosen ones — by kind, by path, the n-th call — with a
// chosen errno, before they reach the kernel. pebble's errorfs is the model,
// one level down: under the real backends instead of over them.
//
// It implements conformance.Injector, so the conformance suite can prove
// durability and stickiness on the real backends:
//
//	conformance.Run(t, factory, conformance.WithInjector(faultseam.ForConformance))
//
// I/O that does not go through segfile's system calls — io_uring requests —
// reaches the same injector when the backend reports it with segfile.Begin
// before submitting (a non-nil error: complete the request with it, without
// submitting) and segfile.End at completion, with Via "io_uring" and the
// kind that says what the request does (OpPwrite for a WRITE, OpWriteDurable
// for an RWF_DSYNC write, OpFdatasync for an FSYNC(DATASYNC)). Such a backend
// then runs the suite with this injector as it is.
package faultseam

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

// Rule fails matching operations.
type Rule struct {
	// Kinds the rule matches (none: every kind).
	Kinds []segfile.OpKind
	// Path, when set, must equal the operation's path; PathContains, when
	// set, must be part of it.
	Path, PathContains string
	// Nth, when > 0, fails only the n-th matching operation (1-based,
	// counted by this rule); 0 fails every one.
	Nth int
	// Err is returned instead of issuing the operation; nil means EIO.
	Err error

	seen int
}

func (r *Rule) matches(op segfile.Op) bool {
	if len(r.Kinds) > 0 && !containsKind(r.Kinds, op.Kind) {
		return false
	}
	if r.Path != "" && op.Path != r.Path {
		return false
	}
	return r.PathContains == "" || strings.Contains(op.Path, r.PathContains)
}

func containsKind(kinds []segfile.OpKind, k segfile.OpKind) bool {
	for _, x := range kinds {
		if x == k {
			return true
		}
	}
	return false
}

// Call is one operation the injector saw, with its result.
type Call struct {
	segfile.Op
	Err error
}

func (c Call) String() string {
	s := fmt.Sprintf("%s(%s", c.Name(), c.Path)
	if c.NewPath != "" {
		s += " → " + c.NewPath
	}
	switch c.Kind {
	case segfile.OpPwrite, segfile.OpWriteDurable, segfile.OpMsync, segfile.OpFallocate, segfile.OpWriteback:
		s += fmt.Sprintf(" [%d,%d)", c.Offset, c.Offset+c.Length)
	case segfile.OpFtruncate:
		s += fmt.Sprintf(" to %d", c.Length)
	}
	s += ")"
	if c.Err != nil {
		s += " = " + c.Err.Error()
	}
	return s
}

// Injector records and fails the operations on files under one directory.
type Injector struct {
	dir       string
	uninstall func()

	mu    sync.Mutex
	rules []*Rule
	calls []Call
	hits  int
}

// New installs an injector for dir until t ends.
func New(t testing.TB, dir string) *Injector {
	inj := &Injector{dir: dir}
	inj.uninstall = segfile.Install(dir, inj)
	t.Cleanup(inj.uninstall)
	return inj
}

// ForConformance is a conformance.NewInjector.
func ForConformance(t testing.TB, dir string) conformance.Injector { return New(t, dir) }

// Fail adds a rule.
func (inj *Injector) Fail(r Rule) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.rules = append(inj.rules, &r)
}

// Clear removes every rule (the device recovers); the record stays.
func (inj *Injector) Clear() {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.rules = nil
}

// Hits is how many operations a rule failed.
func (inj *Injector) Hits() int {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return inj.hits
}

// Calls returns the operations seen so far, in issue order.
func (inj *Injector) Calls() []Call {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return append([]Call(nil), inj.calls...)
}

// Before implements segfile.Hook.
func (inj *Injector) Before(op segfile.Op) error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	for _, r := range inj.rules {
		if !r.matches(op) {
			continue
		}
		r.seen++
		if r.Nth > 0 && r.seen != r.Nth {
			continue
		}
		inj.hits++
		if r.Err == nil {
			return syscall.EIO
		}
		return r.Err
	}
	return nil
}

// After implements segfile.Hook.
func (inj *Injector) After(op segfile.Op, err error) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	inj.calls = append(inj.calls, Call{Op: op, Err: err})
}

// kindOf maps a seam operation to the conformance suite's kinds.
func kindOf(k segfile.OpKind) conformance.Kind {
	switch k {
	case segfile.OpCreate:
		return conformance.KindCreate
	case segfile.OpPwrite:
		return conformance.KindWrite
	case segfile.OpWriteDurable:
		return conformance.KindWriteDurable
	case segfile.OpFdatasync, segfile.OpFsync:
		return conformance.KindSync
	case segfile.OpMsync:
		return conformance.KindSyncRange
	case segfile.OpFallocate, segfile.OpFtruncate:
		return conformance.KindAllocate
	case segfile.OpRename:
		return conformance.KindRename
	case segfile.OpRemove:
		return conformance.KindRemove
	case segfile.OpSyncDir:
		return conformance.KindSyncDir
	}
	return conformance.KindOther
}

// seamKinds maps the conformance suite's kinds back to the seam's.
func seamKinds(kinds []conformance.Kind) []segfile.OpKind {
	var out []segfile.OpKind
	for k := segfile.OpCreate; k <= segfile.OpWriteback; k++ {
		for _, want := range kinds {
			if kindOf(k) == want {
				out = append(out, k)
			}
		}
	}
	return out
}

// Ops implements conformance.Injector.
func (inj *Injector) Ops() []conformance.Op {
	calls := inj.Calls()
	ops := make([]conformance.Op, len(calls))
	for i, c := range calls {
		ops[i] = conformance.Op{Kind: kindOf(c.Kind), Name: c.Name(), Path: c.Path, NewPath: c.NewPath,
			Offset: c.Offset, Length: c.Length, Err: c.Err}
	}
	return ops
}

// FailNext implements conformance.Injector.
func (inj *Injector) FailNext(path string, err error, kinds ...conformance.Kind) {
	if len(kinds) == 0 {
		panic(errors.New("faultseam: FailNext without kinds"))
	}
	inj.Fail(Rule{Kinds: seamKinds(kinds), Path: path, Nth: 1, Err: err})
}
