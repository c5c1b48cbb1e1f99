package uring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
	"golang.org/x/sys/unix"
)

// newTestBackend returns a backend closed at the end of the test, or skips
// saying why io_uring cannot run.
func newTestBackend(t testing.TB, opts Options) mappedfile.Backend {
	t.Helper()
	b, err := NewBackend(opts)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.(io.Closer).Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	return b
}

var backendVariants = []struct {
	name string
	opts Options
}{
	{"uring", Options{}},
	{"uring-direct", Options{Direct: true}},
	{"uring-sync-at-commit", Options{SyncAtCommit: true}},
	{"uring-sync-at-commit-linked", Options{SyncAtCommit: true, SyncMethod: SyncLinkedFsync}},
	{"uring-direct-sync-at-commit", Options{Direct: true, SyncAtCommit: true}},
	{"uring-direct-sync-at-commit-ring-dsync", Options{Direct: true, SyncAtCommit: true, SyncMethod: SyncDSync}},
	{"uring-direct-sync-at-commit-linked", Options{Direct: true, SyncAtCommit: true, SyncMethod: SyncLinkedFsync}},
	{"uring-prezero", Options{PreZero: true}},
	{"uring-direct-prezero", Options{Direct: true, PreZero: true}},
	// A segment-sized staging ring mapped at NewBackend.
	{"uring-direct-prepared", Options{Direct: true, SegmentSizeBytes: conformance.SegmentSizeBytes}},
}

func TestConformance(t *testing.T) {
	for _, v := range backendVariants {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, func(t testing.TB) mappedfile.Backend {
				b := newTestBackend(t, v.opts)
				if want := map[bool]string{false: NameBuffered, true: NameDirect}[v.opts.Direct]; b.Name() != want {
					t.Fatalf("Name() = %q, want %q", b.Name(), want)
				}
				return b
			}, conformance.WithInjector(faultseam.ForConformance))
		})
	}
}

type fill byte

func (f fill) EncodeAt(dst []byte, pos int64) error {
	for i := range dst {
		dst[i] = byte(f) + byte(pos+int64(i))
	}
	return nil
}

func openSeg(t *testing.T, b mappedfile.Backend, path string, size int64) mappedfile.MappedFile {
	t.Helper()
	mf, err := b.Open(context.Background(), mappedfile.Spec{Path: path, SizeBytes: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mf.Close() })
	return mf
}

// TestDirectTailBlockRewritten checks the file itself after each commit:
// whole blocks, the partial tail padded with zeros, then rewritten.
func TestDirectTailBlockRewritten(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true})
	path := filepath.Join(t.TempDir(), "seg")
	const size = 16 * 4096
	mf := openSeg(t, b, path, size)
	ctx := context.Background()
	var wrote int64
	for _, n := range []int{100, 5000, 3000, 4096, 1, 20000} {
		if _, err := mf.Append(n, fill(3)); err != nil {
			t.Fatal(err)
		}
		wrote += int64(n)
		if c, err := mf.Commit(ctx, 0); err != nil || c != wrote {
			t.Fatalf("commit: %d, %v; want %d", c, err, wrote)
		}
		if mf.ReadablePosition() != wrote {
			t.Fatalf("readable %d, want wrote %d", mf.ReadablePosition(), wrote)
		}
		onDisk, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, size)
		_ = fill(3).EncodeAt(want[:wrote], 0)
		if i := commonPrefix(onDisk, want); i != size {
			t.Fatalf("after committing %d bytes the file differs at %d: %#x, want %#x", wrote, i, onDisk[i], want[i])
		}
	}
	if fl, err := mf.Flush(ctx, 0); err != nil || fl != wrote {
		t.Fatalf("flush: %d, %v", fl, err)
	}
}

// TestDirectReadsFromBufferUntilSealed reads an unsealed direct segment
// (served from the staging buffer, past the committed position too) and a
// sealed one (from the file, after the buffer went back to the pool).
func TestDirectReadsFromBufferUntilSealed(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true, StagingBuffers: 1})
	dir := t.TempDir()
	const size = 8 * 4096
	ctx := context.Background()
	mf := openSeg(t, b, filepath.Join(dir, "a"), size)
	if _, err := mf.Append(size-10, fill(1)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size-10)
	if n, err := mf.ReadAt(got, 0); n != size-10 || err != nil {
		t.Fatalf("read before commit: %d, %v", n, err)
	}
	want := make([]byte, size)
	_ = fill(1).EncodeAt(want, 0)
	if !bytes.Equal(got, want[:size-10]) {
		t.Fatal("uncommitted bytes read from the buffer differ")
	}
	// The one staging buffer is lent: a second new segment must wait.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Open(short, mappedfile.Spec{Path: filepath.Join(dir, "b"), SizeBytes: size}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open with the pool empty: %v, want DeadlineExceeded", err)
	}
	if _, err := mf.Append(10, fill(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// Sealed: the buffer is back in the pool, reads come from the file.
	other := openSeg(t, b, filepath.Join(dir, "b"), size)
	if _, err := other.Append(size, fill(9)); err != nil { // overwrite the reused buffer
		t.Fatal(err)
	}
	all := make([]byte, size)
	if n, err := mf.ReadAt(all, 0); n != size || err != nil {
		t.Fatalf("read of the sealed segment: %d, %v", n, err)
	}
	if !bytes.Equal(all, want) {
		t.Fatalf("sealed segment read differs at %d", commonPrefix(all, want))
	}
}

// TestDirectReadsCommittedBytesFromTheRing: bytes an O_DIRECT commit wrote
// are not in the page cache; while the staging ring still holds them a read
// copies them from the ring instead of reading the file (which for a
// just-committed record means waiting for the device: dispatch reads every
// record right after its commit). Before, a read below the committed block
// went to the file and brought its pages into the page cache.
func TestDirectReadsCommittedBytesFromTheRing(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true})
	const size = 16 * 4096
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a")
	mf := openSeg(t, b, path, size)
	const n = 3*4096 + 100
	if _, err := mf.Append(n, fill(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil { // none cached, whatever the kernel did
		t.Fatal(err)
	}
	got := make([]byte, n)
	if m, err := mf.ReadAt(got, 0); m != n || err != nil {
		t.Fatalf("read: %d, %v", m, err)
	}
	want := make([]byte, size)
	_ = fill(3).EncodeAt(want, 0)
	if !bytes.Equal(got, want[:n]) {
		t.Fatalf("read differs at %d", commonPrefix(got, want[:n]))
	}
	// The same for SendRange (a slave's sender): from the ring, not
	// sendfile from the file.
	var sent bytes.Buffer
	if m, err := mf.SendRange(ctx, &sent, 0, n); m != n || err != nil {
		t.Fatalf("send: %d, %v", m, err)
	}
	if !bytes.Equal(sent.Bytes(), want[:n]) {
		t.Fatalf("sent bytes differ at %d", commonPrefix(sent.Bytes(), want[:n]))
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, size/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for i, v := range vec[:3] {
		if v&1 != 0 {
			t.Fatalf("page %d of the committed bytes is in the page cache after the read and the send: it was read from the file, not the ring", i)
		}
	}
}

// TestBufferedReleasesBufferWhenCommitted: a full, committed uring segment
// gives its buffer back before Flush, and later reads come from the file.
func TestBufferedReleasesBufferWhenCommitted(t *testing.T) {
	b := newTestBackend(t, Options{StagingBuffers: 1})
	dir := t.TempDir()
	const size = 8 * 4096
	ctx := context.Background()
	mf := openSeg(t, b, filepath.Join(dir, "a"), size)
	if _, err := mf.Append(size, fill(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	other := openSeg(t, b, filepath.Join(dir, "b"), size) // would block if the buffer were still lent
	if _, err := other.Append(size, fill(6)); err != nil {
		t.Fatal(err)
	}
	all := make([]byte, size)
	if _, err := mf.ReadAt(all, 0); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	_ = fill(5).EncodeAt(want, 0)
	if !bytes.Equal(all, want) {
		t.Fatalf("read differs at %d", commonPrefix(all, want))
	}
}

// TestDirectTruncateKeepsTailBlock reopens a direct segment, truncates it in
// the middle of a block and appends: the head of that block (valid data on
// disk) must survive the rewrite of the block.
func TestDirectTruncateKeepsTailBlock(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true})
	path := filepath.Join(t.TempDir(), "seg")
	const size = 8 * 4096
	ctx := context.Background()
	mf, err := b.Open(ctx, mappedfile.Spec{Path: path, SizeBytes: size})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Append(3*4096, fill(7)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	mf.Close()
	mf = openSeg(t, b, path, size)
	const validEnd = 4096 + 1000
	if err := mf.Truncate(ctx, validEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Append(500, fill(7)); err != nil { // same pattern: positions continue
		t.Fatal(err)
	}
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, validEnd+500)
	if n, err := mf.ReadAt(got, 0); n != len(got) || err != nil {
		t.Fatalf("read: %d, %v", n, err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	_ = fill(7).EncodeAt(want[:validEnd+500], 0)
	if !bytes.Equal(got, want[:len(got)]) || !bytes.Equal(onDisk, want) {
		t.Fatalf("after truncate+append: read differs at %d, file differs at %d", commonPrefix(got, want), commonPrefix(onDisk, want))
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, o := range []Options{
		{Direct: true, WriteChunkBytes: 6000},
		{SyncMethod: SyncDSync},
		{SyncMethod: 99},
		{StagingBytes: 5000},
		{StagingBytes: 2 << 30},
		{StagingBuffers: -1},
		{StagingBytes: 1 << 20, MaxAppendBytes: 1 << 20},
		{SegmentSizeBytes: 64 << 10, MaxAppendBytes: 64 << 10},
	} {
		if _, err := NewBackend(o); !errors.Is(err, mappedfile.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", o, err)
		}
	}
}

// TestSyncAtCommitFlushWithoutIO: with SyncAtCommit the commit is durable
// (RWF_DSYNC or a linked fsync), so Flush only moves the flushed position;
// it works even with the ring gone.
func TestSyncAtCommitFlushWithoutIO(t *testing.T) {
	for _, o := range []Options{{Direct: true, SyncAtCommit: true}, {Direct: true, SyncAtCommit: true, SyncMethod: SyncLinkedFsync},
		{Direct: true, SyncAtCommit: true, SyncMethod: SyncDSync},
		{SyncAtCommit: true}, {SyncAtCommit: true, SyncMethod: SyncLinkedFsync}} {
		b, err := NewBackend(o)
		if errors.Is(err, mappedfile.ErrUnsupported) {
			testenv.Skip(t, testenv.Uring, "%v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		mf, err := b.Open(context.Background(), mappedfile.Spec{Path: filepath.Join(t.TempDir(), "seg"), SizeBytes: 8 * 4096})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mf.Append(5000, fill(2)); err != nil {
			t.Fatal(err)
		}
		if c, err := mf.Commit(context.Background(), 0); err != nil || c != 5000 {
			t.Fatalf("%+v: commit: %d, %v", o, c, err)
		}
		ring := b.(*backend).ring
		if err := ring.Close(); err != nil {
			t.Fatal(err)
		}
		if fl, err := mf.Flush(context.Background(), 0); err != nil || fl != 5000 {
			t.Fatalf("%+v: flush without a ring: %d, %v; want 5000", o, fl, err)
		}
		if err := mf.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.(*backend).pool.close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDirectConcurrentReadersPastCommitted: readers follow the write
// position of a uring-direct segment (bytes served from the buffer) while it
// is committed, flushed and sealed; then the buffer is reused by another
// segment with other bytes, and the readers, now served from the file,
// must never see them.
func TestDirectConcurrentReadersPastCommitted(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true, StagingBuffers: 1, WriteChunkBytes: 16384, QueueDepth: 4})
	dir := t.TempDir()
	const size = 64 * 4096
	ctx := context.Background()
	mf := openSeg(t, b, filepath.Join(dir, "a"), size)
	want := make([]byte, size)
	_ = fill(1).EncodeAt(want, 0)
	var wg sync.WaitGroup
	var sealed atomic.Bool
	errs := make(chan error, 8)
	wg.Add(1)
	go func() { // appender, then commit and flush service
		defer wg.Done()
		for n := 1; mf.WrotePosition() < size; n = n%977 + 1 {
			n := int(min(int64(n), size-mf.WrotePosition()))
			if _, err := mf.Append(n, fill(1)); err != nil {
				errs <- err
				return
			}
			if n%5 == 0 {
				if _, err := mf.Commit(ctx, 1); err != nil {
					errs <- err
					return
				}
			}
		}
		if _, err := mf.Commit(ctx, 0); err != nil {
			errs <- err
			return
		}
		if _, err := mf.Flush(ctx, 0); err != nil {
			errs <- err
			return
		}
		sealed.Store(true)
		other, err := b.Open(ctx, mappedfile.Spec{Path: filepath.Join(dir, "b"), SizeBytes: size})
		if err != nil {
			errs <- err
			return
		}
		defer other.Close()
		if _, err := other.Append(size, fill(99)); err != nil {
			errs <- err
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 9000)
			for i := 0; !sealed.Load() || i < 200; i++ {
				readable := mf.ReadablePosition()
				if readable > mf.WrotePosition() {
					errs <- fmt.Errorf("readable %d past wrote", readable)
					return
				}
				pos := int64((i*7919 + r*31) % size)
				if pos >= readable {
					continue
				}
				n := min(int64(len(buf)), readable-pos)
				m, err := mf.ReadAt(buf[:n], pos)
				if int64(m) != n || err != nil {
					errs <- fmt.Errorf("read [%d,+%d) below readable %d: %d, %v", pos, n, readable, m, err)
					return
				}
				if !bytes.Equal(buf[:n], want[pos:pos+n]) {
					errs <- fmt.Errorf("read [%d,+%d) saw bytes that were not written there", pos, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestBackendCloseWhileFileOpen(t *testing.T) {
	b := newTestBackend(t, Options{})
	mf, err := b.Open(context.Background(), mappedfile.Spec{Path: filepath.Join(t.TempDir(), "seg"), SizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.(io.Closer).Close(); err == nil || !strings.Contains(err.Error(), "close every file first") {
		t.Fatalf("close with a file open: %v", err)
	}
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	// The deferred Close of newTestBackend now succeeds.
}

// TestDirectOnTmpfs: tmpfs gained O_DIRECT in Linux 6.6; before that the
// open fails with EINVAL and the error must say so.
func TestDirectOnTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		testenv.Skip(t, testenv.Uring, "a tmpfs at /dev/shm to check O_DIRECT there")
	}
	dir, err := os.MkdirTemp("/dev/shm", "mqstore-uring-test-")
	if err != nil {
		testenv.Skip(t, testenv.Uring, "a writable /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := newTestBackend(t, Options{Direct: true})
	mf, err := b.Open(context.Background(), mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: 4 * 4096})
	if err != nil {
		if !strings.Contains(err.Error(), "O_DIRECT") {
			t.Fatalf("open on tmpfs: %v; want the error to name O_DIRECT", err)
		}
		t.Logf("tmpfs refuses O_DIRECT here, with: %v", err)
		return
	}
	defer mf.Close()
	if _, err := mf.Append(5000, fill(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, "seg"))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4*4096)
	_ = fill(4).EncodeAt(want[:5000], 0)
	if !bytes.Equal(onDisk, want) {
		t.Fatalf("tmpfs file differs at %d", commonPrefix(onDisk, want))
	}
	t.Logf("tmpfs accepts O_DIRECT on kernel %s", kernelRelease())
}

// TestMemoryReads: uring-direct says reads past its staging ring go to the
// device (the page cache holds nothing it wrote); buffered uring has no
// such bound.
func TestMemoryReads(t *testing.T) {
	for _, c := range []struct {
		direct bool
		want   int64
	}{{true, 1 << 20}, {false, 0}} {
		b := newTestBackend(t, Options{Direct: c.direct, StagingBytes: 1 << 20})
		m, ok := b.(mappedfile.MemoryReads)
		if !ok {
			t.Fatalf("direct %v: the backend does not implement mappedfile.MemoryReads", c.direct)
		}
		if got := m.MemoryReadBytes(); got != c.want {
			t.Errorf("direct %v: MemoryReadBytes %d, want %d", c.direct, got, c.want)
		}
	}
}
