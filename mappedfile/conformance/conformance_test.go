package conformance_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
	"github.com/mqstore/mqstore/mmapio"
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

// brokenEnv names, in a child process, the broken backend the suite runs
// against (TestSuiteCatchesBrokenBackends).
const brokenEnv = "MQSTORE_CONFORMANCE_BROKEN"

// brokenBackends are backends broken in one way each, with the checks that
// must catch them.
var brokenBackends = []struct {
	name  string
	run   func(t *testing.T)
	catch []string
}{
	{"reads-past-readable", func(t *testing.T) {
		conformance.Run(t, func(testing.TB) mappedfile.Backend {
			return wrapped{mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true}), func(mf mappedfile.MappedFile) mappedfile.MappedFile {
				return readsPastReadable{mf}
			}}
		})
	}, []string{"ReadsStopAtReadable"}},
	{"flush-without-sync", func(t *testing.T) {
		conformance.Run(t, func(testing.TB) mappedfile.Backend {
			return wrapped{mmapio.New(mmapio.Options{}), func(mf mappedfile.MappedFile) mappedfile.MappedFile {
				return &flushWithoutSync{MappedFile: mf}
			}}
		}, conformance.WithInjector(faultseam.ForConformance))
	}, []string{"FlushSyncsWhatItReports", "FailedIOIsStickyAndNeverRetried"}},
	{"sync-retried", func(t *testing.T) {
		conformance.Run(t, func(testing.TB) mappedfile.Backend {
			return wrapped{mmapio.New(mmapio.Options{}), func(mf mappedfile.MappedFile) mappedfile.MappedFile {
				return &retriesSync{MappedFile: mf}
			}}
		}, conformance.WithInjector(faultseam.ForConformance))
	}, []string{"FailedIOIsStickyAndNeverRetried/Flush/sync-range"}},
}

// TestSuiteCatchesBrokenBackends runs the suite, each time in a child
// process, against a backend broken in one way, and checks that the suite
// fails it in the checks that should notice. In the child (brokenEnv set)
// the test runs the suite itself.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if name := os.Getenv(brokenEnv); name != "" {
		for _, b := range brokenBackends {
			if b.name == name {
				b.run(t)
				return
			}
		}
		t.Fatalf("%s=%q names no broken backend", brokenEnv, name)
	}
	for _, b := range brokenBackends {
		t.Run(b.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesBrokenBackends$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+b.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a backend broken as %s:\n%s", b.name, out)
			}
			for _, check := range b.catch {
				if want := "--- FAIL: TestSuiteCatchesBrokenBackends/" + check; !strings.Contains(string(out), want) {
					t.Errorf("expected %q in the output:\n%s", want, out)
				}
			}
		})
	}
}

// wrapped wraps every file its backend opens.
type wrapped struct {
	mappedfile.Backend
	wrap func(mappedfile.MappedFile) mappedfile.MappedFile
}

func (b wrapped) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.Backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return b.wrap(mf), nil
}

// readsPastReadable lets readers see bytes past the readable position.
type readsPastReadable struct{ mappedfile.MappedFile }

func (r readsPastReadable) ReadablePosition() int64 { return r.WrotePosition() }

func (r readsPastReadable) ReadAt(dst []byte, pos int64) (int, error) {
	// Pretend the whole remaining segment is readable.
	if pos >= r.SizeBytes() {
		return 0, io.EOF
	}
	n, err := r.MappedFile.ReadAt(dst, pos)
	if n < len(dst) && pos+int64(len(dst)) <= r.SizeBytes() {
		clear(dst[n:])
		return len(dst), nil
	}
	return n, err
}

// flushWithoutSync reports bytes flushed without syncing them: the bug of a
// Flush whose fdatasync was removed.
type flushWithoutSync struct {
	mappedfile.MappedFile
	flushed atomic.Int64
}

func (f *flushWithoutSync) FlushedPosition() int64 { return f.flushed.Load() }

func (f *flushWithoutSync) Flush(ctx context.Context, leastPages int) (int64, error) {
	if err := f.Err(); err != nil {
		return f.flushed.Load(), err
	}
	c := f.CommittedPosition()
	f.flushed.Store(c)
	return c, nil
}

// retriesSync retries a failed flush with a sync of its own and reports
// success: the bug of an error that is not sticky.
type retriesSync struct {
	mappedfile.MappedFile
	failed atomic.Bool
}

func (r *retriesSync) Flush(ctx context.Context, leastPages int) (int64, error) {
	if !r.failed.Load() {
		fl, err := r.MappedFile.Flush(ctx, leastPages)
		if err == nil {
			return fl, nil
		}
		r.failed.Store(true)
		return fl, err
	}
	f, err := os.OpenFile(r.Path(), os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := segfile.Fdatasync(r.Path(), int(f.Fd())); err != nil {
		return 0, err
	}
	return r.CommittedPosition(), nil
}

func (r *retriesSync) Err() error { return nil }
