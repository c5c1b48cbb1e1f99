package consumequeue

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mmapio"
)

func mmapBackend(t testing.TB) mappedfile.Backend {
	t.Helper()
	return mmapio.New(mmapio.Options{})
}

// TestOnDiskMmap writes a queue through the mmap backend and checks the
// files with plain reads: names, sizes and unit bytes.
func TestOnDiskMmap(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	cfg := Config{Dir: root, Backend: mmapBackend(t), FileSizeBytes: 200}
	q, err := Open(ctx, cfg, "TopicTest", 3)
	if err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 4, 27)
	if err := q.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "TopicTest", "3")
	for _, f := range []struct {
		name  string
		first int64
	}{{"00000000000000000000", 0}, {"00000000000000000200", 10}, {"00000000000000000400", 20}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 200 {
			t.Fatalf("%s: %d bytes", f.name, len(b))
		}
		for i := int64(0); i < 10; i++ {
			off := f.first + i
			var want [UnitSize]byte
			switch {
			case off < 4:
				EncodeUnit(want[:], Unit{Size: blankSize})
			case off < 27:
				EncodeUnit(want[:], unitFor(off))
			}
			if got := b[i*UnitSize : (i+1)*UnitSize]; !bytes.Equal(got, want[:]) {
				t.Fatalf("%s unit %d = % x, want % x", f.name, i, got, want)
			}
		}
	}
	q, err = Open(ctx, cfg, "TopicTest", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	checkQueue(t, q, 4, 27)
	if err := q.TruncateByPhysical(ctx, unitFor(15).PhysicalOffset); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 15, 31)
	checkQueue(t, q, 4, 31)
}
