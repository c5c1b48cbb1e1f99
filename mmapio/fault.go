package mmapio

import (
	"fmt"
	"io"
	"runtime/debug"
	"unsafe"

	"github.com/mqstore/mqstore/mappedfile"
)

// A store into or load from the mapping raises SIGBUS when the page has no
// backing any more (another process shrank the file) or cannot be read in
// (an I/O error). debug.SetPanicOnFault turns that into a panic in the
// faulting goroutine; the guards below recover it, check that the address
// lies in this mapping, and return an error wrapping ErrFault. Any other
// panic, including a fault elsewhere, is re-raised untouched.

// addressError is what the runtime panics with on a fault (runtime.Error
// with the faulting address).
type addressError interface {
	error
	Addr() uintptr
}

// recoverFault must be deferred directly (recover only works there).
func (m *file) recoverFault(errp *error, op string) {
	r := recover()
	if r == nil {
		return
	}
	fault, ok := r.(addressError)
	if !ok {
		panic(r)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m.mapping)))
	addr := fault.Addr()
	if addr < base || addr-base >= uintptr(len(m.mapping)) {
		panic(r)
	}
	*errp = fmt.Errorf("mmapio: %s %s: fault at segment position %d (file shrunk by someone else, or an I/O error reading the page): %w",
		op, m.Path(), addr-base, ErrFault)
}

// encodeGuarded runs enc on dst (a slice of the mapping) and zeroes dst when
// enc fails. faultErr is set when the mapping faulted.
func (m *file) encodeGuarded(enc mappedfile.Encoder, dst []byte, filePos int64) (encodeErr, faultErr error) {
	defer m.recoverFault(&faultErr, "append to")
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if encodeErr = enc.EncodeAt(dst, filePos); encodeErr != nil {
		clear(dst)
	}
	return encodeErr, nil
}

// copyGuarded copies src into dst, one of them a slice of the mapping.
func (m *file) copyGuarded(dst, src []byte, op string) (faultErr error) {
	defer m.recoverFault(&faultErr, op)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	copy(dst, src)
	return nil
}

// swapEachGuarded swaps each field of width bytes at filePos[i] (checked)
// with p's i-th, handing the old bytes back in old.
func (m *file) swapEachGuarded(p, old []byte, width int, filePos []int64) (faultErr error) {
	defer m.recoverFault(&faultErr, "overwrite")
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	mapping := m.mapping
	if width == 4 { // an IndexFile slot: moves, not memmove calls
		for i, pos := range filePos {
			dst := (*[4]byte)(mapping[pos : pos+4])
			*(*[4]byte)(old[i*4:]) = *dst
			*dst = *(*[4]byte)(p[i*4:])
		}
		return nil
	}
	for i, pos := range filePos {
		dst := mapping[pos : pos+int64(width)]
		copy(old[i*width:], dst)
		copy(dst, p[i*width:(i+1)*width])
	}
	return nil
}

// touchGuarded writes a zero byte at every page start in [from, to).
func (m *file) touchGuarded(from, to int64) (faultErr error) {
	defer m.recoverFault(&faultErr, "touch")
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for pos := from; pos < to; pos += mappedfile.PageSize {
		m.mapping[pos] = 0
	}
	return nil
}

// writeGuarded hands src (a slice of the mapping) to w.
func (m *file) writeGuarded(w io.Writer, src []byte) (written int, err error) {
	defer m.recoverFault(&err, "send from")
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return w.Write(src)
}

// zeroGuarded zeroes mapping[from:to].
func (m *file) zeroGuarded(from, to int64) (faultErr error) {
	defer m.recoverFault(&faultErr, "truncate")
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	clear(m.mapping[from:to])
	return nil
}
