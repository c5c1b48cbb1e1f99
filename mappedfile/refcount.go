package mappedfile

import "sync/atomic"

// RefCount is the reference counter the backends share (RocketMQ's
// ReferenceResource). It starts with one reference held by the owner. Retain
// fails once Shutdown has been called; the cleanup function passed to Shutdown
// runs exactly once, when the last reference is released, so memory is never
// unmapped under a reader.
type RefCount struct {
	count    atomic.Int64 // references held; 0 means cleaned up
	closing  atomic.Bool
	shutdown atomic.Bool
	cleanup  atomic.Pointer[func()]
	started  atomic.Bool
}

func (r *RefCount) init() {
	if r.started.CompareAndSwap(false, true) {
		r.count.Add(1)
	}
}

// Init must be called once before the counter is shared.
func (r *RefCount) Init() { r.init() }

// Retain takes a long-lived reference (a reader holding a segment across
// calls); false once the resource is closing or gone. Reads use Acquire.
func (r *RefCount) Retain() bool {
	if r.closing.Load() {
		return false
	}
	for {
		c := r.count.Load()
		if c <= 0 {
			return false
		}
		if r.count.CompareAndSwap(c, c+1) {
			if r.closing.Load() {
				// Shutdown began between the check and the CAS: give it back.
				r.Release()
				return false
			}
			return true
		}
	}
}

// Acquire takes a short reference for the duration of one read
// (ReadAt, SendRange): unlike Retain it succeeds while the resource is
// closing, as long as its memory has not been cleaned up, so a reader that
// holds a Retain on a deleted file can still read through it. False once the
// cleanup has run. Pair with Release.
func (r *RefCount) Acquire() bool {
	for {
		c := r.count.Load()
		if c <= 0 {
			return false
		}
		if r.count.CompareAndSwap(c, c+1) {
			return true
		}
	}
}

// Release drops a reference; the last one runs the cleanup.
func (r *RefCount) Release() {
	if c := r.count.Add(-1); c == 0 {
		if f := r.cleanup.Load(); f != nil {
			(*f)()
		}
	} else if c < 0 {
		panic("mappedfile: RefCount released more often than retained")
	}
}

// Closing reports whether Shutdown has been called.
func (r *RefCount) Closing() bool { return r.closing.Load() }

// Shutdown stops new Retains and drops the owner's reference; cleanup runs
// now if nobody else holds one, or at the last Release. It returns false when
// Shutdown was already called (cleanup is then not replaced).
func (r *RefCount) Shutdown(cleanup func()) bool {
	if !r.shutdown.CompareAndSwap(false, true) {
		return false
	}
	r.cleanup.Store(&cleanup)
	r.closing.Store(true)
	r.Release()
	return true
}

// Held returns the number of references currently held (owner included).
func (r *RefCount) Held() int64 { return r.count.Load() }
