//go:build linux

package crashfs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestOverlayModel runs seeded random writes, truncates, zeroings and
// syncs on an inode and on a plain model (the running view and the durable
// bytes): reads must match the view, the backing file must match the
// durable bytes after every step, and a power loss without writeback must
// leave exactly the durable bytes.
func TestOverlayModel(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		path := filepath.Join(t.TempDir(), "f")
		initial := pattern(seed, rng.IntN(5*pageSize))
		if err := os.WriteFile(path, initial, 0o644); err != nil {
			t.Fatal(err)
		}
		rw, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		n, err := newInode(1, "f", rw)
		if err != nil {
			t.Fatal(err)
		}
		view := append([]byte(nil), initial...)
		durable := append([]byte(nil), initial...)
		for step := 0; step < 60; step++ {
			switch op := rng.IntN(10); {
			case op < 5:
				off := int64(rng.IntN(6 * pageSize))
				var data []byte
				if rng.IntN(4) == 0 {
					data = make([]byte, pageSize*(1+rng.IntN(2)))
					off -= off % pageSize
				} else {
					data = pattern(rng.Uint64(), 1+rng.IntN(2*pageSize))
				}
				if err := n.write(data, off); err != nil {
					t.Fatal(err)
				}
				if end := off + int64(len(data)); end > int64(len(view)) {
					view = append(view, make([]byte, end-int64(len(view)))...)
				}
				copy(view[off:], data)
			case op < 7:
				size := int64(rng.IntN(6 * pageSize))
				if err := n.truncate(size); err != nil {
					t.Fatal(err)
				}
				if size < int64(len(view)) {
					view = view[:size]
				} else {
					view = append(view, make([]byte, size-int64(len(view)))...)
				}
			case op < 8:
				off, length := int64(rng.IntN(6*pageSize)), int64(rng.IntN(3*pageSize))
				if err := n.zero(off, length); err != nil {
					t.Fatal(err)
				}
				for i := off; i < min(off+length, int64(len(view))); i++ {
					view[i] = 0
				}
			default:
				if err := n.sync(); err != nil {
					t.Fatal(err)
				}
				durable = append(durable[:0], view...)
			}
			got := make([]byte, len(view)+100)
			m, err := n.read(got, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:m], view) {
				t.Fatalf("seed %d step %d: read %d bytes, differs from the %d of the view", seed, step, m, len(view))
			}
			if n.size != int64(len(view)) {
				t.Fatalf("seed %d step %d: size %d, view %d", seed, step, n.size, len(view))
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, durable) {
				t.Fatalf("seed %d step %d: the backing file (%d bytes) is not the durable image (%d)", seed, step, len(b), len(durable))
			}
		}
		if seed%2 == 0 {
			n.powerLoss(nil)
			if b, _ := os.ReadFile(path); !bytes.Equal(b, durable) {
				t.Fatalf("seed %d: after a power loss without writeback the backing is not the durable image", seed)
			}
		} else {
			// Writeback: each byte is the durable one, the running one or
			// zero (an unsynced shrink that reached the disk), and the size is
			// one of the two. (TestPowerLossTorn checks whole sectors.)
			r := n.powerLoss(rng)
			b, _ := os.ReadFile(path)
			if len(b) != len(durable) && len(b) != len(view) || int64(len(b)) != r.KeptSize {
				t.Fatalf("seed %d: size %d after the cut, durable %d, running %d, reported %d", seed, len(b), len(durable), len(view), r.KeptSize)
			}
			at := func(img []byte, lo, hi int) []byte {
				out := make([]byte, hi-lo)
				if lo < len(img) {
					copy(out, img[lo:min(hi, len(img))])
				}
				return out
			}
			for i := range b {
				if c := b[i]; c != 0 && c != at(durable, i, i+1)[0] && c != at(view, i, i+1)[0] {
					t.Fatalf("seed %d: the byte at %d after the cut is neither durable, running nor zero", seed, i)
				}
			}
		}
		rw.Close()
	}
}

// TestPowerLossTorn: with writeback every backing sector is the durable or
// the written one, the size is one of the two, and the report accounts for
// every unsynced page.
func TestPowerLossTorn(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		path := filepath.Join(t.TempDir(), "f")
		old := pattern(seed, 8*pageSize)
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		rw, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := newInode(1, "f", rw)
		neu := pattern(seed+1000, 12*pageSize)
		if err := n.write(neu, 0); err != nil {
			t.Fatal(err)
		}
		r := n.powerLoss(rand.New(rand.NewPCG(seed, 3)))
		rw.Close()
		b, _ := os.ReadFile(path)
		if int64(len(b)) != r.KeptSize || (len(b) != len(old) && len(b) != len(neu)) {
			t.Fatalf("seed %d: size %d, report %d", seed, len(b), r.KeptSize)
		}
		for s := 0; s < len(b); s += sectorSize {
			e := s + sectorSize
			isOld := e <= len(old) && bytes.Equal(b[s:e], old[s:e])
			isZero := e > len(old) && bytes.Equal(b[s:e], make([]byte, sectorSize))
			if !isOld && !isZero && !bytes.Equal(b[s:e], neu[s:e]) {
				t.Fatalf("seed %d: sector at %d is neither the old nor the new bytes", seed, s)
			}
		}
		pages := len(r.Torn)
		for _, rs := range append(r.Dropped, r.Kept...) {
			pages += int(rs.Len / pageSize)
		}
		if pages != 12 {
			t.Fatalf("seed %d: the report accounts for %d of 12 unsynced pages: %+v", seed, pages, r)
		}
	}
}
