// Package invariants holds the store's assertions: checks of what the
// code's comments claim (a position only moves forward, flushed ≤ committed
// ≤ written, a record ends at a segment boundary or before a blank, a
// queue's offsets are contiguous, a waiter is answered once). A failed
// check is a programmer error, never an operating condition — bad input,
// a failing disk and a cancelled context get errors — so it panics with a
// message naming the invariant and the values, "invariant violated:
// <name>: …".
//
// The checks are on in a build with the mqstore_invariants tag (make test
// runs every test with it) and compiled out otherwise. Enabled is a
// constant set by two files with opposite build tags; each helper is
//
//	func Forward(name string, before, after int64) {
//		if Enabled && after < before {
//			fail(…)
//		}
//	}
//
// small enough to inline (`go build -gcflags=-m ./internal/invariants`
// reports "can inline" for every helper, with and without the tag), so in
// a normal build the condition is the constant false at every call site
// and the compiler deletes the call with its body. For example
//
//	//go:noinline
//	func advance(pos *int64, to int64) {
//		invariants.Forward("position", *pos, to)
//		*pos = to
//	}
//
// compiles (go tool objdump, amd64) to two instructions without the tag,
// MOVQ BX, 0(AX); RET — even the load of *pos is gone — and with it to the
// load, a CMPQ/JGE and an out-of-line call of fail on the violating path.
// The caveat: Go evaluates arguments before the call even when the call is
// dead, and cannot drop a call or an atomic load that may have effects. A
// check whose arguments cost something (an atomic load, a method call on
// an interface) is written
//
//	if invariants.Enabled {
//		invariants.Ordered("flushed ≤ committed", f.FlushedPosition(), f.CommittedPosition())
//	}
//
// so that the whole block is dead in a normal build. Arguments that are
// locals already at hand need no guard.
//
// TestCompiledOut (run without the tag) checks that a violated check does
// nothing in a normal build; TestFires (with the tag) that each one panics
// with its name and values.
package invariants

import "fmt"

// Violation is the value a failed check panics with. Its Error says which
// invariant and the values.
type Violation struct {
	Name   string // the invariant, as the call site names it
	Detail string // the values that broke it
}

func (v *Violation) Error() string {
	return "invariant violated: " + v.Name + ": " + v.Detail
}

// fail panics with a Violation. Kept out of line so the helpers stay
// small enough to inline.
//
//go:noinline
func fail(name, format string, args ...any) {
	panic(&Violation{Name: name, Detail: fmt.Sprintf(format, args...)})
}

// True checks that cond holds; detail says what was seen.
func True(cond bool, name, detail string) {
	if Enabled && !cond {
		fail(name, "%s", detail)
	}
}

// Forward checks that a position moved forward or stayed: after ≥ before.
func Forward(name string, before, after int64) {
	if Enabled && after < before {
		fail(name, "moved back from %d to %d", before, after)
	}
}

// Ordered checks low ≤ high (flushed ≤ committed, an end within a size).
func Ordered(name string, low, high int64) {
	if Enabled && low > high {
		fail(name, "%d > %d", low, high)
	}
}

// Ordered3 checks low ≤ mid ≤ high (flushed ≤ committed ≤ written).
func Ordered3(name string, low, mid, high int64) {
	if Enabled && (low > mid || mid > high) {
		fail(name, "want %d ≤ %d ≤ %d", low, mid, high)
	}
}

// Equal checks got == want (the next queue offset, a write position that
// must be where the next unit goes).
func Equal(name string, got, want int64) {
	if Enabled && got != want {
		fail(name, "got %d, want %d", got, want)
	}
}

// Once is a flag that may be set once: a waiter's answer, a one-shot
// release. The zero value is unset. Not safe for concurrent Set: the
// callers set it under the lock that guards the waiter.
type Once struct{ set bool }

// Set marks the flag and checks it was not set before. In a normal build
// it does nothing (and the flag stays false).
func (o *Once) Set(name string) {
	if Enabled {
		if o.set {
			fail(name, "done a second time")
		}
		o.set = true
	}
}
