package conformance_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

func TestMemFS(t *testing.T) {
	conformance.Run(t, func(testing.TB) mappedfile.Backend {
		return mappedfile.NewMemFS(mappedfile.MemOptions{})
	})
}

func TestMemFSBuffered(t *testing.T) {
	conformance.Run(t, func(testing.TB) mappedfile.Backend {
		return mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})
	})
}

// brokenBackend opens files that let readers see bytes past the readable
// position: the suite must catch it.
type brokenBackend struct{ mappedfile.Backend }

func (b brokenBackend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.Backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return readsPastReadable{mf}, nil
}

type readsPastReadable struct{ mappedfile.MappedFile }

func (r readsPastReadable) ReadablePosition() int64 { return r.WrotePosition() }

func (r readsPastReadable) ReadAt(dst []byte, pos int64) (int, error) {
	// Pretend the whole remaining segment is readable.
	if pos >= r.SizeBytes() {
		return 0, io.EOF
	}
	save := r.MappedFile.ReadablePosition()
	_ = save
	n, err := r.MappedFile.ReadAt(dst, pos)
	if n < len(dst) && pos+int64(len(dst)) <= r.SizeBytes() {
		clear(dst[n:])
		return len(dst), nil
	}
	return n, err
}

// TestBrokenHelper runs the suite against the broken backend when the parent
// test asks for it; on its own it does nothing.
func TestBrokenHelper(t *testing.T) {
	if os.Getenv("MQSTORE_CONFORMANCE_BROKEN") != "1" {
		t.Skip("run by TestSuiteCatchesBrokenFile")
	}
	conformance.Run(t, func(testing.TB) mappedfile.Backend {
		return brokenBackend{mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})}
	})
}

func TestSuiteCatchesBrokenFile(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "MQSTORE_CONFORMANCE_BROKEN=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a file that reads past the readable position:\n%s", out)
	}
	for _, check := range []string{"--- FAIL: TestBrokenHelper/ReadsStopAtReadable"} {
		if !strings.Contains(string(out), check) {
			t.Errorf("expected %q in the output:\n%s", check, out)
		}
	}
}
