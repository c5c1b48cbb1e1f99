//go:build linux

package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/internal/testenv"
	"golang.org/x/sys/unix"
)

// failingDisk is an ext4 file system whose device fails writes on demand:
// a loop device over a sparse image on a small tmpfs. Filling the tmpfs
// makes a write to a page the image does not hold yet fail (ENOSPC from the
// loop device, EIO or ENOSPC from a sync) — the kernel's own writeback
// error, with its page-cache state after it. One catch: the loop driver
// completes a write that its backing file took only in part as a success,
// so a write that starts in a page the image holds "succeeds" however
// little of it was stored; a test makes the write it wants to fail start on
// a page boundary past everything written (4 KiB blocks keep file pages
// and image pages aligned).
type failingDisk struct {
	t      *testing.T
	j      *hostctl.Journal
	back   string // the tmpfs
	dev    string // the loop device
	mnt    string // the ext4 file system
	filler string
}

func newFailingDisk(t *testing.T) *failingDisk {
	t.Helper()
	testenv.NeedRoot(t, "a loop device and mounts make a device whose writes fail")
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, testenv.Loop, "%s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testenv.Skip(t, testenv.Loop, "no loop devices: %v", err)
	}
	base := t.TempDir()
	j, err := hostctl.OpenJournal(filepath.Join(base, "state"), hostctl.Default())
	if err != nil {
		t.Fatal(err)
	}
	d := &failingDisk{t: t, j: j, back: filepath.Join(base, "back"), mnt: filepath.Join(base, "mnt")}
	t.Cleanup(func() {
		if err := j.Undo(); err != nil {
			t.Errorf("undo the disk: %v", err)
		}
	})
	if err := j.Mount("tmpfs", "tmpfs", d.back, "size=24m"); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(d.back, "img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if d.dev, err = j.AttachLoop(img); err != nil {
		t.Fatal(err)
	}
	// No journal (its writes would fail too and stop the file system), and
	// every inode table written now, not by a background thread later.
	if err := hostctl.RunTool("mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "^has_journal", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", d.dev); err != nil {
		t.Fatal(err)
	}
	if err := j.Mount(d.dev, "ext4", d.mnt); err != nil {
		t.Fatal(err)
	}
	d.filler = filepath.Join(d.back, "filler")
	return d
}

// fail fills the tmpfs: from now on a write to a block the image lacks fails.
func (d *failingDisk) fail() {
	d.t.Helper()
	f, err := os.OpenFile(d.filler, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4096} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					d.t.Fatalf("fill the tmpfs: %v", err)
				}
				break
			}
		}
	}
}

// heal empties the tmpfs again.
func (d *failingDisk) heal() {
	d.t.Helper()
	if err := os.Remove(d.filler); err != nil {
		d.t.Fatal(err)
	}
}

// powerCycle unmounts and mounts the file system again: its page cache is
// gone, and what is read next comes from the device — what a machine that
// lost its power would find.
func (d *failingDisk) powerCycle() {
	d.t.Helper()
	if err := hostctl.RunTool("umount", d.mnt); err != nil {
		d.t.Fatal(err)
	}
	if err := hostctl.RunTool("mount", "-t", "ext4", d.dev, d.mnt); err != nil {
		d.t.Fatal(err)
	}
}

// TestFailedSyncIsNotTakenDurableAfterRestart: a sync fails on a real
// device (the kernel's writeback error), the store stops, and a new store
// opens the same directory in the same page cache (a restarted process on a
// machine that kept running). Recovery must not take the record whose sync
// failed as durable — after a failed writeback ext4 keeps its pages cached
// and clean, and a new descriptor's sync succeeds without writing them — or
// records acknowledged after the restart sit behind bytes the device never
// had, and a power loss cuts them off. Every backend that keeps files runs
// it; uring-direct writes around the page cache and passes either way.
func TestFailedSyncIsNotTakenDurableAfterRestart(t *testing.T) {
	for _, b := range Backends() {
		if b.Volatile {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			d := newFailingDisk(t)
			dir := filepath.Join(d.mnt, "store")
			o := smallLogicsOptions(Options{Backend: b.Name, FlushMode: FlushSync, PrewriteSegments: PrewriteOff})
			o.SegmentSizeBytes = 4 << 20
			s := openStore(t, dir, o)
			type ackedPut struct {
				res     PutResult
				i, size int
			}
			var acked []ackedPut
			put := func(s *Store, i, size int) (PutResult, error) {
				return s.Put(ctx, testMessage("T", 0, i, size))
			}
			for i := range 20 {
				size := 1024
				if i == 19 {
					// The last record ends the durable log on a page: the
					// write that fails must not start in a page the image
					// holds (see failingDisk).
					last := acked[18].res
					end := last.PhysicalOffset + int64(last.Size)
					overhead := int64(last.Size) - 1024 // the same for message 19
					size = int(pageAlign(end+overhead+1024) - end - overhead)
				}
				res, err := put(s, i, size)
				if err != nil {
					t.Fatalf("put %d before the failure: %v", i, err)
				}
				acked = append(acked, ackedPut{res, i, size})
			}
			durableEnd := s.FlushedOffset()
			if durableEnd%4096 != 0 {
				t.Fatalf("the durable log ends at %d, not on a page", durableEnd)
			}

			d.fail()
			// 512 KiB: whole pages that no later append dirties again.
			if res, err := put(s, 20, 512<<10); err == nil {
				t.Fatalf("a put whose sync could not reach the device was acknowledged at %d", res.PhysicalOffset)
			}
			_ = s.Close() // fails: the store stopped at the failed sync
			d.heal()

			s = openStore(t, dir, o)
			if end := s.MaxOffset(); end != durableEnd {
				t.Errorf("after the restart the log ends at %d; the device holds records up to %d", end, durableEnd)
			}
			for i := 21; i < 41; i++ {
				res, err := put(s, i, 1024)
				if err != nil {
					t.Fatalf("put %d after the restart: %v", i, err)
				}
				acked = append(acked, ackedPut{res, i, 1024})
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			d.powerCycle()
			s = openStore(t, dir, o)
			defer s.Close()
			for _, a := range acked {
				r, err := s.ReadMessage(ctx, a.res.PhysicalOffset)
				if err != nil {
					t.Fatalf("message %d, acknowledged at %d, is gone after the power cycle: %v", a.i, a.res.PhysicalOffset, err)
				}
				if !bytes.Equal(r.Body, testMessage("T", 0, a.i, a.size).Body) {
					t.Fatalf("message %d, acknowledged at %d, has another body after the power cycle", a.i, a.res.PhysicalOffset)
				}
			}
		})
	}
}

// pageAlign rounds n up to a multiple of 4 KiB.
func pageAlign(n int64) int64 { return (n + 4095) &^ 4095 }
