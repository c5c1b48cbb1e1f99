package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
)

// Environment of the writer process TestRecoverySyncsOnDisk starts (TestMain
// runs writeAndWait in it).
const (
	envWriterDir     = "MQSTORE_ENGINE_WRITER_DIR"
	envWriterBackend = "MQSTORE_ENGINE_WRITER_BACKEND"
	writerReady      = "writer: ready"
)

// writerOptions are the options of the store the writer fills and the test
// recovers: several small segments, the ConsumeQueue and index flushers off
// (an hour), so that nothing but recovery syncs what the writer wrote.
func writerOptions(backend string) Options {
	return Options{Backend: backend, FlushMode: FlushAsync, SegmentSizeBytes: 64 << 10, NoPreallocate: true,
		FlushInterval: time.Hour, FlushThoroughInterval: time.Hour, FlushLeastPages: 1 << 20,
		CommitInterval: time.Hour, CommitThoroughInterval: time.Hour, CommitLeastPages: 1 << 20,
		ConsumeQueueFlushInterval: time.Hour, ConsumeQueueFlushThoroughInterval: time.Hour,
		ConsumeQueueFileSizeBytes: 20 * 1000, IndexSlotCount: 101, IndexMaxEntries: 100000, Logger: quietLogger}
}

// writeAndWait fills a store and leaves everything it wrote unsynced in the
// page cache — the CommitLog (committed into the file for a buffered
// backend, never flushed), ConsumeQueues and index — then says so and
// waits to be killed. It returns an exit code.
func writeAndWait(dir, backend string) int {
	ctx := context.Background()
	s, err := Open(ctx, dir, writerOptions(backend))
	if err != nil {
		fmt.Println("writer:", err)
		return 1
	}
	// Hold the lock the commit and flush services take: from here on no
	// flush runs; the commit below moves a buffered backend's bytes into the
	// file (the page cache) and nothing syncs them.
	s.log.syncMu.Lock()
	for i := 0; i < 300; i++ {
		if _, err := s.Put(ctx, testMessage("Disk", int32(i%2), i, 600)); err != nil {
			fmt.Println("writer:", err)
			return 1
		}
	}
	if _, err := s.log.commitLocked(ctx, 0); err != nil {
		fmt.Println("writer:", err)
		return 1
	}
	s.dispatcher.Wakeup()
	if err := s.WaitDispatched(ctx, s.log.queue.WroteOffset()); err != nil {
		fmt.Println("writer:", err)
		return 1
	}
	fmt.Println(writerReady, s.log.queue.Len(), "segments")
	select {} // killed here
}

// storeFiles lists the CommitLog, ConsumeQueue and index files of a store.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, sub := range []string{commitLogDirName, consumeQueueDirName, indexDirName} {
		err := filepath.WalkDir(filepath.Join(dir, sub), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestRecoverySyncsOnDisk (item 1, on the real backends): a process that
// wrote records, ConsumeQueue units and index entries without syncing any
// is killed; once the recovering Open returns — the store now claims all of
// it durable — no page of any CommitLog, ConsumeQueue or index file may be
// dirty in the page cache (internal/pagecache reads the page flags). It
// fails when recovery skips a sync, and under
// strace -f -e inject=fsync,fdatasync,msync:retval=0.
// (uring-direct writes around the page cache: nothing to check there.)
func TestRecoverySyncsOnDisk(t *testing.T) {
	testenv.NeedRoot(t, "to read page flags (/proc/kpageflags)")
	for _, backend := range []string{"mmap", "transient", "uring"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), envWriterDir+"="+dir, envWriterBackend+"="+backend)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			if !strings.HasPrefix(line, writerReady) {
				if strings.Contains(line, "unsupported on this system") {
					testenv.Skip(t, backendNeed(backend), "%s", line)
				}
				t.Fatalf("the writer did not get ready: %q", line)
			}
			files := storeFiles(t, dir)
			dirty := 0
			for _, p := range files {
				pages, err := pagecache.Unsynced(p, 0, fileSize(t, p))
				if errors.Is(err, pagecache.ErrNoAccess) {
					testenv.Skip(t, testenv.Root, "%v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				dirty += len(pages)
			}
			if dirty == 0 {
				t.Fatalf("no page of the killed writer's %d files is dirty: the kernel wrote them back before the test could look (is vm.dirty_expire_centisecs very low?); nothing to prove", len(files))
			}
			s := openStore(t, dir, writerOptions(backend))
			defer s.Close()
			if !s.RecoveredAfterCrash() {
				t.Fatal("the store did not recover")
			}
			for _, p := range storeFiles(t, dir) {
				if err := pagecache.CheckSynced(p, 0, fileSize(t, p)); err != nil {
					t.Errorf("after the recovering open claimed it durable: %v", err)
				}
			}
			if !t.Failed() {
				t.Logf("%s: %d files, %d dirty pages after the kill, none after recovery", strings.TrimSpace(line), len(files), dirty)
			}
		})
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestDirectorySyncsOnDisk (item 6, on the real file system): every
// directory the store creates has its parent synced after it (ConsumeQueue
// topic and queue directories, index, commitlog), and every file removal is
// followed by a sync of its directory — seen through segfile's seam, which
// records the system calls of the backends and of storefs.
func TestDirectorySyncsOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	inj := faultseam.New(t, filepath.Dir(dir))
	o := smallLogicsOptions(Options{Backend: "mmap", FlushMode: FlushSync, CleanInterval: time.Hour})
	o.diskUsed = func(string) (float64, error) { return 90, nil }
	s := openStore(t, dir, o)
	putN(t, s, "DirSync", 2, 400, 300, nil)
	if n, err := s.CleanExpired(ctx); err != nil || n == 0 {
		t.Fatalf("retention: %d %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	calls := inj.Calls()
	synced := func(d string, after int) bool {
		for _, c := range calls[after:] {
			if c.Kind == segfile.OpSyncDir && c.Path == d && c.Err == nil {
				return true
			}
		}
		return false
	}
	for _, d := range []string{filepath.Dir(dir), dir, filepath.Join(dir, consumeQueueDirName), filepath.Join(dir, consumeQueueDirName, "DirSync")} {
		if !synced(d, 0) {
			t.Errorf("%s, where the store created a directory, was never synced", d)
		}
	}
	removals := 0
	for i, c := range calls {
		if c.Kind == segfile.OpRemove && c.Err == nil {
			removals++
			if !synced(filepath.Dir(c.Path), i+1) {
				t.Errorf("the removal of %s is not followed by a sync of its directory", c.Path)
			}
		}
	}
	if removals == 0 {
		t.Fatal("no removal seen: the test did not exercise retention")
	}
}
