//go:build linux

package mmapio

import (
	"testing"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"golang.org/x/sys/unix"
)

// TestInterruptedSyncsAreRetried: an msync, fdatasync or zeroing pwrite
// interrupted by a signal (EINTR) is issued again — it did nothing — so Flush and Truncate
// succeed and no sticky error is left; the seam sees both attempts.
func TestInterruptedSyncsAreRetried(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	mf := openSegment(t, Options{}, dir, "seg", 64<<10)
	for _, tc := range []struct {
		name string
		kind segfile.OpKind
		call func() error
	}{
		{"Flush", segfile.OpMsync, func() error {
			appendPattern(t, mf, 5000)
			_, err := mf.Flush(ctx, 0)
			return err
		}},
		{"Truncate", segfile.OpFdatasync, func() error { return mf.Truncate(ctx, mf.WrotePosition()) }},
		{"Truncate/pwrite", segfile.OpPwrite, func() error {
			// Bytes past the valid end, beyond its page: zeros are written there.
			appendPattern(t, mf, 20000)
			return mf.Truncate(ctx, mf.WrotePosition()-16000)
		}},
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
			n := 0
			for _, c := range inj.Calls()[before:] {
				if c.Kind == tc.kind {
					n++
				}
			}
			if inj.Hits() == 0 || n < 2 {
				t.Fatalf("the interrupted %v was not issued again: %v", tc.kind, inj.Calls()[before:])
			}
		})
	}
}
