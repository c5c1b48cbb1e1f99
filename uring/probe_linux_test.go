package uring

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

func TestProbeSequentialWrite(t *testing.T) {
	dir := t.TempDir()
	r, err := ProbeSequentialWrite(context.Background(), dir, 8<<20+12345, 1<<20, 4)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		t.Skipf("needs io_uring and O_DIRECT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 8<<20 || r.Duration <= 0 || r.MBps <= 0 || r.MiBps >= r.MBps {
		t.Fatalf("result %+v: want 8 MiB (whole blocks) with a positive rate", r)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the probe left %d files behind", len(left))
	}
	if _, err := ProbeSequentialWrite(context.Background(), dir, 1<<20, 1000, 4); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("unaligned block: %v, want ErrInvalidArgument", err)
	}
}

func TestProbeSyncLatency(t *testing.T) {
	dir := t.TempDir()
	lat, err := ProbeSyncLatency(context.Background(), dir, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 20 {
		t.Fatalf("%d latencies, want 20", len(lat))
	}
	for i, d := range lat {
		if d <= 0 {
			t.Fatalf("latency %d is %v", i, d)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the probe left %d files behind", len(left))
	}
}
