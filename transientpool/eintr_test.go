//go:build linux

package transientpool

import (
	"testing"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"golang.org/x/sys/unix"
)

// TestInterruptedCallsAreRetried: a pwrite or fdatasync interrupted by a
// signal (EINTR) is issued again — it did nothing — so Commit and Flush
// succeed and no sticky error is left; the seam sees both attempts.
func TestInterruptedCallsAreRetried(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1, NoLock: true})
	mf := openSeg(t, b, specIn(dir, "seg"))
	want := make([]byte, testSegmentBytes)
	for _, tc := range []struct {
		name string
		kind segfile.OpKind
		call func() error
	}{
		{"Commit", segfile.OpPwrite, func() error {
			appendBytes(t, mf, want, record(5, 3000))
			_, err := mf.Commit(ctx, 0)
			return err
		}},
		{"Flush", segfile.OpFdatasync, func() error { _, err := mf.Flush(ctx, 0); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{tc.kind}, Nth: 1, Err: unix.EINTR})
			defer inj.Clear()
			before := len(inj.Calls())
			if err := tc.call(); err != nil {
				t.Fatalf("%s with an interrupted %v: %v", tc.name, tc.kind, err)
			}
			if err := mf.Err(); err != nil {
				t.Fatalf("sticky error after an EINTR: %v", err)
			}
			var attempts []faultseam.Call
			for _, c := range inj.Calls()[before:] {
				if c.Kind == tc.kind {
					attempts = append(attempts, c)
				}
			}
			if len(attempts) != 2 || attempts[0].Err != unix.EINTR || attempts[1].Err != nil {
				t.Fatalf("the interrupted %v was not issued again: %v", tc.kind, attempts)
			}
		})
	}
	checkFile(t, mf.Path(), want)
}
