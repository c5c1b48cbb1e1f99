package device

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

func noFilesLeft(t *testing.T, dir string) {
	t.Helper()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the probe left %d files behind", len(left))
	}
}

func TestSequentialWrite(t *testing.T) {
	dir := t.TempDir()
	r, err := SequentialWrite(context.Background(), dir, 8<<20+12345, 1<<20, 4)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "io_uring and O_DIRECT on the temporary directory: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 8<<20 || r.Duration <= 0 || r.MBps() <= 0 {
		t.Fatalf("result %+v: want 8 MiB (whole blocks) with a positive rate", r)
	}
	noFilesLeft(t, dir)
	for _, bad := range []struct {
		total        int64
		block, depth int
	}{{1 << 20, 1000, 4}, {1 << 20, 4096, 0}, {100, 4096, 1}} {
		if _, err := SequentialWrite(context.Background(), dir, bad.total, bad.block, bad.depth); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestSyncProbeLayout: each writer's writes fill its own part of the file,
// the parts follow one another without overlap, and the file holds them.
func TestSyncProbeLayout(t *testing.T) {
	for _, p := range []SyncProbe{
		{WriteBytes: 4096, Count: 20, InFlight: 1},
		{WriteBytes: 16 * 1290, Count: 21, InFlight: 2},
		{WriterBytes: []int{3 * 1290, 2 * 1290}, Count: 21, InFlight: 2},
	} {
		per, starts, largest := p.layout()
		if per != p.Count/p.InFlight || starts[0] != 0 || len(starts) != p.InFlight+1 {
			t.Fatalf("%+v: %d writes each, parts %v", p, per, starts)
		}
		for w := range p.InFlight {
			if got, want := starts[w+1]-starts[w], int64(per)*int64(p.writeBytes(w)); got != want {
				t.Errorf("%+v: writer %d has %d bytes for %d writes of %d", p, w, got, per, p.writeBytes(w))
			}
			if p.writeBytes(w) > largest {
				t.Errorf("%+v: writer %d writes %d bytes, more than the buffer's %d", p, w, p.writeBytes(w), largest)
			}
		}
	}
}

func TestSyncWrites(t *testing.T) {
	for _, p := range []SyncProbe{
		{WriteBytes: 4096, Count: 20, InFlight: 1},
		{WriteBytes: 4096, Count: 20, InFlight: 1, Prewritten: true},
		{WriteBytes: 16 * 1290, Count: 21, InFlight: 2, Prewritten: true},                  // 10 each: not block-sized, not block-aligned
		{WriterBytes: []int{3 * 1290, 2 * 1290}, Count: 20, InFlight: 2, Prewritten: true}, // 5 producers' records split over two syncs
		{WriteBytes: 16 * 1290, Count: 20, InFlight: 1, Prewritten: true, Direct: true},    // each op's blocks rewrite the last one's tail
		{WriteBytes: 4096, Count: 20, InFlight: 1, Direct: true},
	} {
		dir := t.TempDir()
		r, err := SyncWrites(context.Background(), dir, p)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Count / p.InFlight * p.InFlight
		if len(r.Latencies) != want {
			t.Fatalf("%+v: %d latencies, want %d", p, len(r.Latencies), want)
		}
		wantBytes := int64(want * p.WriteBytes)
		if p.WriterBytes != nil {
			wantBytes = int64(p.Count/p.InFlight) * int64(p.WriterBytes[0]+p.WriterBytes[1])
		}
		if r.Bytes != wantBytes {
			t.Errorf("%+v: %d bytes written, want %d", p, r.Bytes, wantBytes)
		}
		var sum time.Duration
		for i, d := range r.Latencies {
			if d <= 0 {
				t.Fatalf("%+v: latency %d is %v", p, i, d)
			}
			sum += d
		}
		// One writer: the writes follow each other; two overlap, so the
		// run is at least the longer writer's share and at most the sum.
		if r.Elapsed < sum/time.Duration(p.InFlight) || (p.InFlight == 1 && r.Elapsed < sum) {
			t.Errorf("%+v: elapsed %v for latencies summing to %v", p, r.Elapsed, sum)
		}
		noFilesLeft(t, dir)
	}
	for _, bad := range []SyncProbe{{WriteBytes: 4096, Count: 0, InFlight: 1}, {WriteBytes: 0, Count: 5, InFlight: 1}, {WriteBytes: 4096, Count: 1, InFlight: 2},
		{WriterBytes: []int{4096}, Count: 4, InFlight: 2}, {WriterBytes: []int{4096, 0}, Count: 4, InFlight: 2}, {WriteBytes: 4096, Count: 4, InFlight: 2, Direct: true}} {
		if _, err := SyncWrites(context.Background(), t.TempDir(), bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestCreateSegment(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ prewrite, direct bool }{{false, false}, {true, false}, {true, true}} {
		d, err := CreateSegment(context.Background(), dir, 4<<20, c.prewrite, c.direct)
		if err != nil || d <= 0 {
			t.Fatalf("%+v: %v, %v", c, d, err)
		}
		noFilesLeft(t, dir)
	}
	if _, err := CreateSegment(context.Background(), dir, 1000, true, false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a segment of 1000 bytes: %v", err)
	}
}

// BenchmarkSequentialWrite is the device probe: sequential O_DIRECT writes
// of 1 MiB at queue depth 32, 1 GiB per iteration, to a file in the test's
// temporary directory (run with -benchtime=Nx).
func BenchmarkSequentialWrite(b *testing.B) {
	const total, block, depth = 1 << 30, 1 << 20, 32
	dir := b.TempDir()
	b.SetBytes(total)
	var rates []float64
	for range b.N {
		r, err := SequentialWrite(context.Background(), dir, total, block, depth)
		if errors.Is(err, mappedfile.ErrUnsupported) {
			testenv.Skip(b, testenv.Uring, "io_uring and O_DIRECT on the temporary directory: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		rates = append(rates, r.MBps())
	}
	slices.Sort(rates)
	// ns/op also counts creating and preallocating the file; these are the
	// probe's own figures (first submission to last completion).
	b.ReportMetric(rates[0], "min-MB/s")
	b.ReportMetric(rates[len(rates)/2], "median-MB/s")
	b.ReportMetric(rates[len(rates)-1], "max-MB/s")
}
