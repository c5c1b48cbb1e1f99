package segment

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestTruncateCrashLeavesContiguousSegments cuts the power at every
// operation of a TruncateTo that deletes segments: whatever unsynced
// removals survive, the directory must still hold a contiguous run (a gap
// stops Open with ErrCorruptDirectory).
func TestTruncateCrashLeavesContiguousSegments(t *testing.T) {
	ctx := context.Background()
	const size = 4096
	cfg := Config{Dir: "/s/commitlog", SegmentSizeBytes: size}
	for seed := uint64(0); seed < 20; seed++ {
		for at := int64(1); at <= 12; at++ {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			cfg.Backend = fs
			q, err := Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 6; i++ {
				mf, err := q.NextForAppend(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Append(size, mappedfile.Bytes(make([]byte, size))); err != nil {
					t.Fatal(err)
				}
			}
			fs.ArmCrash(at, mappedfile.TornNone, rand.New(rand.NewPCG(seed, uint64(at))))
			_ = q.TruncateTo(ctx, size+100)
			fs.Disarm()
			q.Close()
			fs.Restart()
			q, err = Open(ctx, cfg)
			if errors.Is(err, ErrCorruptDirectory) {
				t.Fatalf("seed %d, power loss at operation %d of the truncation: %v", seed, at, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			q.Close()
		}
	}
}
