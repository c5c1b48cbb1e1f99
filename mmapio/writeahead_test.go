//go:build linux

package mmapio

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// TestWriteAheadSparesTheAppendsTheirFaults: after a Flush of a file
// opened with Spec.WriteAhead, appends into the pages ahead — the partly
// written one the msync write-protected, and 512 KiB never touched before
// — take no page fault of their own, nor do appends each after a Flush
// (the Flush faults their pages in); without it they take one a page, and
// one an append. The file then holds
// what was appended, and zeros past it, after the next Flush, either way.
func TestWriteAheadSparesTheAppendsTheirFaults(t *testing.T) {
	runtime.LockOSThread() // the faults are counted for this thread
	defer runtime.UnlockOSThread()
	dir := t.TempDir()
	const size = 16 << 20 // the pages ahead: 1 MiB, a sixteenth of it
	for _, ahead := range []bool{false, true} {
		spec := mappedfile.Spec{Path: filepath.Join(dir, strconv.FormatBool(ahead)), SizeBytes: size, WriteAhead: ahead}
		f := openSpec(t, spec)
		appendPattern(t, f, 1000) // a partly written page
		if _, err := f.Flush(testContext(t), 0); err != nil {
			t.Fatal(err)
		}
		before := minorFaults(t)
		for f.WrotePosition() < 1000+512<<10 {
			if _, err := f.Append(1000, patternEncoder{}); err != nil {
				t.Fatal(err)
			}
		}
		faults := minorFaults(t) - before
		if ahead && faults > 8 {
			t.Errorf("WriteAhead: %d page faults appending 512 KiB after a Flush, want none", faults)
		}
		if !ahead && faults < 64 {
			t.Errorf("without WriteAhead: %d page faults appending 512 KiB after a Flush; the check cannot tell the two apart", faults)
		}
		t.Logf("WriteAhead %v: %d minor faults for 128 pages", ahead, faults)
		// A Flush after every append, as a group commit of one record
		// does: each append but those that open a page goes into the page
		// the last msync write-protected.
		faults = 0
		for range 64 {
			before := minorFaults(t)
			if _, err := f.Append(1000, patternEncoder{}); err != nil {
				t.Fatal(err)
			}
			faults += minorFaults(t) - before // the append's, not the Flush's
			if _, err := f.Flush(testContext(t), 0); err != nil {
				t.Fatal(err)
			}
		}
		if ahead && faults > 4 {
			t.Errorf("WriteAhead: %d page faults in 64 appends, each after a Flush, want none", faults)
		}
		if !ahead && faults < 40 {
			t.Errorf("without WriteAhead: %d page faults in 64 appends, each after a Flush; the check cannot tell the two apart", faults)
		}
		t.Logf("WriteAhead %v: %d minor faults for 64 appends after a Flush each", ahead, faults)
		wrote, err := f.Flush(testContext(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(spec.Path)
		if err != nil {
			t.Fatal(err)
		}
		checkPattern(t, got[:wrote], 0)
		checkZeros(t, got[wrote:], wrote)
	}
}

func minorFaults(t *testing.T) int64 {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}
