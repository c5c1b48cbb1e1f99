package engine

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// specRecorder is a MemFS that records the spec of every file it opens.
type specRecorder struct {
	*mappedfile.MemFS
	mu    sync.Mutex
	specs []mappedfile.Spec
}

func (b *specRecorder) Inner() mappedfile.Backend { return b.MemFS }

func (b *specRecorder) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	b.mu.Lock()
	b.specs = append(b.specs, spec)
	b.mu.Unlock()
	return b.MemFS.Open(ctx, spec)
}

// TestHugePagesWhereSyncedSeldom: the engine asks for huge pages for the
// files it writes in bulk and syncs at intervals — async CommitLog
// segments — and never for sync CommitLog segments, which a group commit
// syncs after every few appends (a sync of a byte in a huge page writes
// the whole 2 MiB), nor for ConsumeQueue files (a broker with many queues
// would sync one partly written huge page per queue), nor for IndexFiles
// (a key written into a clean huge page dirties all 2 MiB of it). Sync
// CommitLog segments ask for small folios instead (SmallFolios: the
// kernel's readahead would make large ones), and IndexFiles for random
// access (RandomAccess: the same, and their slots are random).
func TestHugePagesWhereSyncedSeldom(t *testing.T) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		t.Run(mode.String(), func(t *testing.T) {
			rec := &specRecorder{MemFS: mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})}
			s := openStore(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: rec, FlushMode: mode}))
			for i := range 200 { // rolls the CommitLog, the queues and the index
				if _, err := s.Put(context.Background(), testMessage("HugeTopic", int32(i%2), i, 1000)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.WaitDispatched(context.Background(), s.MaxOffset()); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			seen := map[string]int{}
			for _, sp := range rec.specs {
				dir := filepath.Base(filepath.Dir(sp.Path))
				kind := map[string]string{commitLogDirName: "commitlog", indexDirName: "index"}[dir]
				if kind == "" && strings.Contains(sp.Path, string(filepath.Separator)+consumeQueueDirName+string(filepath.Separator)) {
					kind = "consumequeue"
				}
				if kind == "" {
					continue
				}
				seen[kind]++
				want := kind == "commitlog" && mode == FlushAsync
				if sp.HugePages != want {
					t.Errorf("%s %s opened with HugePages %v, want %v", kind, sp.Path, sp.HugePages, want)
				}
				if want := kind == "commitlog" && mode == FlushSync; sp.SmallFolios != want {
					t.Errorf("%s %s opened with SmallFolios %v, want %v", kind, sp.Path, sp.SmallFolios, want)
				}
				if want := kind == "index"; sp.RandomAccess != want {
					t.Errorf("%s %s opened with RandomAccess %v, want %v", kind, sp.Path, sp.RandomAccess, want)
				}
			}
			for _, kind := range []string{"commitlog", "index", "consumequeue"} {
				if seen[kind] < 2 {
					t.Errorf("%d %s files opened, want several (the test must roll them)", seen[kind], kind)
				}
			}
		})
	}
}
