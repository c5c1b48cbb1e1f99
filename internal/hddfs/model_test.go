package hddfs

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func newDisk(t *testing.T, m Model, capacity int64) *Disk {
	t.Helper()
	d, err := NewDisk(m, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s = %.4g, want %.4g ± %.0f %%", what, got, want, tol*100)
	}
}

func TestDefaultModel(t *testing.T) {
	m := DefaultModel()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if fs := m.FullStrokeSeek(); fs < 15*time.Millisecond || fs > 18*time.Millisecond {
		t.Errorf("full stroke %v, want 15–18 ms", fs)
	}
	within(t, "half a revolution (ms)", ms(m.Revolution())/2, 4.1667, 0.001)
	within(t, "mean media rate (MB/s)", (m.OuterRate+m.InnerRate)/2e6, 156, 0.001)
	for _, bad := range []func(*Model){
		func(m *Model) { m.RPM = 0 },
		func(m *Model) { m.AverageSeek = m.TrackToTrackSeek / 2 },
		func(m *Model) { m.InnerRate = m.OuterRate * 2 },
		func(m *Model) { m.InterfaceRate = math.NaN() },
		func(m *Model) { m.WriteCacheBytes = -1 },
	} {
		b := DefaultModel()
		bad(&b)
		if err := b.Validate(); !errors.Is(err, ErrModel) {
			t.Errorf("Validate(%+v) = %v, want ErrModel", b, err)
		}
	}
	if _, err := NewDisk(m, 0); !errors.Is(err, ErrModel) {
		t.Errorf("NewDisk with no capacity: %v, want ErrModel", err)
	}
}

// TestRandomReads: seeded random 4 KiB reads at queue depth 1 over the
// whole disk take, on average, the average seek, half a revolution and the
// transfer; the seeks alone average the model's average seek.
func TestRandomReads(t *testing.T) {
	m := DefaultModel()
	const capacity = 4 << 30
	d := newDisk(t, m, capacity)
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Duration(0)
	const n = 20000
	var busy time.Duration
	for range n {
		off := r.Int64N(capacity/4096) * 4096
		end := d.Read(now, off, 4096)
		busy += end - now
		now = end + 50*time.Microsecond // the host's turn-around
	}
	s := d.Stats()
	within(t, "mean seek (ms)", ms(s.SeekTime)/float64(s.Seeks), ms(m.AverageSeek), 0.03)
	within(t, "mean rotational latency (ms)", ms(s.RotationTime)/n, ms(m.Revolution())/2, 0.03)
	within(t, "IOPS", n/busy.Seconds(), m.RandomReadIOPS(4096), 0.03)
}

// TestSequentialReads stream at the zone's media rate: 210 MB/s at the
// outer edge, 102 at the inner, with one positioning at the start.
func TestSequentialReads(t *testing.T) {
	m := DefaultModel()
	const capacity = 64 << 30 // 64 MiB of it is about one zone
	for _, c := range []struct {
		at   int64
		rate float64
	}{{0, m.OuterRate}, {capacity - 64<<20, m.InnerRate}} {
		d := newDisk(t, m, capacity)
		now := d.Read(0, c.at, 4096) // positioned
		start := now
		for off := c.at + 4096; off+1<<20 <= c.at+64<<20-4096; off += 1 << 20 {
			now = d.Read(now, off, 1<<20)
		}
		within(t, "streaming rate (B/s)", float64(63<<20)/(now-start).Seconds(), c.rate, 0.01)
		if s := d.Stats(); s.Seeks > 1 {
			t.Errorf("%d seeks streaming from %d, want at most 1", s.Seeks, c.at)
		}
	}
}

// TestSequentialWritesThroughCache: 1 MiB writes arriving as each is
// acknowledged fill the cache at the link's rate, then go at the media
// rate; the closing flush waits for what is cached.
func TestSequentialWritesThroughCache(t *testing.T) {
	m := DefaultModel()
	m.InnerRate = m.OuterRate // one zone: the expected time is plain
	const total = 512 << 20
	d := newDisk(t, m, 1<<30)
	now := time.Duration(0)
	for off := int64(0); off < total; off += 1 << 20 {
		now = d.Write(now+20*time.Microsecond, off, 1<<20)
	}
	if d.Cached() > m.WriteCacheBytes || d.Cached() == 0 {
		t.Errorf("cache holds %d bytes after the writes, want (0, %d]", d.Cached(), m.WriteCacheBytes)
	}
	end := d.Flush(now)
	if d.Cached() != 0 {
		t.Fatalf("cache holds %d bytes after a flush", d.Cached())
	}
	within(t, "write rate with the closing flush (B/s)", total/end.Seconds(), m.OuterRate, 0.02)
	if s := d.Stats(); s.DestagedBytes != total {
		t.Errorf("destaged %d bytes, want %d", s.DestagedBytes, total)
	}
}

// TestSyncWrites: a 4 KiB write just after the previous one, flushed,
// waits for its sector to come round: almost a revolution each.
func TestSyncWrites(t *testing.T) {
	m := DefaultModel()
	d := newDisk(t, m, 1<<30)
	now := d.Flush(d.Write(0, 1<<20, 4096))
	gap := 200 * time.Microsecond
	for i := range 100 {
		w := d.Write(now+gap, 1<<20+int64(i+1)*4096, 4096)
		end := d.Flush(w + 10*time.Microsecond)
		if lat := end - w; lat < m.Revolution()-gap-time.Millisecond || lat > m.Revolution() {
			t.Fatalf("flush %d took %v, want a revolution (%v) less the host's %v", i, lat, m.Revolution(), gap)
		}
		now = end
	}
	// Without a write cache the write itself pays it.
	m.WriteCacheBytes = 0
	d = newDisk(t, m, 1<<30)
	w := d.Write(0, 0, 4096)
	w2 := d.Write(w+gap, 4096, 4096)
	if lat := w2 - w - gap; lat < m.Revolution()-gap-time.Millisecond || lat > m.Revolution() {
		t.Errorf("uncached write took %v, want about a revolution", lat)
	}
	if s := d.Stats(); s.DestagedBytes != 0 || d.Cached() != 0 {
		t.Errorf("uncached writes went through the cache: %+v", s)
	}
}

// TestCacheReads: a read of cached bytes costs the link, not the head.
func TestCacheReads(t *testing.T) {
	m := DefaultModel()
	d := newDisk(t, m, 1<<30)
	w := d.Write(0, 500<<20, 64<<10)
	end := d.Read(w, 500<<20+4096, 8192)
	if s := d.Stats(); s.CacheReads != 1 || end-w > time.Millisecond {
		t.Errorf("read of cached bytes: %v, %d cache reads; want from the cache", end-w, s.CacheReads)
	}
}

// TestCacheAccounting: seeded random overlapping writes; the cache holds
// their union (checked against a bitmap of 4 KiB blocks), never more than
// its size, and a flush empties it.
func TestCacheAccounting(t *testing.T) {
	m := DefaultModel()
	m.WriteCacheBytes = 1 << 20
	const blocks = 4096
	d := newDisk(t, m, blocks*4096)
	r := rand.New(rand.NewPCG(3, 4))
	now := time.Duration(0)
	for range 2000 {
		off := r.Int64N(blocks-16) * 4096
		n := (1 + r.Int64N(16)) * 4096
		now = d.Write(now, off, n) // back to back: little background writing
		var sum int64
		for i, e := range d.cache {
			if e.n <= 0 || (i > 0 && d.cache[i-1].off+d.cache[i-1].n >= e.off) {
				t.Fatalf("cache extents not sorted, disjoint and apart: %v", d.cache)
			}
			sum += e.n
		}
		if sum != d.Cached() || sum > m.WriteCacheBytes {
			t.Fatalf("cache holds %d bytes, counts %d, size %d", sum, d.Cached(), m.WriteCacheBytes)
		}
	}
	// Union check on fresh inserts with no destaging.
	d = newDisk(t, DefaultModel(), blocks*4096)
	var bits [blocks]bool
	for range 500 {
		off := r.Int64N(blocks - 16)
		n := 1 + r.Int64N(16)
		d.insert(off*4096, n*4096)
		var ov int64
		for b := off; b < off+n; b++ {
			bits[b] = true
		}
		_ = ov
	}
	var want int64
	for _, b := range bits {
		if b {
			want += 4096
		}
	}
	if d.Cached() != want {
		t.Errorf("cache holds %d bytes, the union of the writes is %d", d.Cached(), want)
	}
	d.Flush(0)
	if d.Cached() != 0 || len(d.cache) != 0 {
		t.Errorf("flush left %d bytes in %d extents", d.Cached(), len(d.cache))
	}
}
