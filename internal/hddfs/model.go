package hddfs

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Model is the mechanics of the emulated drive. The zero value is not a
// drive: start from DefaultModel and change what differs.
//
// The defaults are Seagate's data sheet for the Barracuda 7200.14
// (ST1000DM003, ST2000DM001): 7200 rpm, average latency 4.16 ms, average
// seek (read) 8.5 ms, max sustained data rate at the outer diameter
// 210 MB/s, average data rate 156 MB/s, 64 MB cache, SATA 6 Gb/s. The data
// sheet gives no track-to-track time; 1 ms is what drives of the class
// publish (Hitachi/HGST specifications: single-track read seek 1.0 ms
// typical).
type Model struct {
	// RPM is the spindle speed: a revolution takes 60/RPM s (8.33 ms at
	// 7200), the average rotational latency half of it (4.17 ms).
	RPM float64
	// TrackToTrackSeek is the seek to the next track; AverageSeek the mean
	// over uniformly random start and end positions. A seek over a fraction
	// x of the stroke takes TrackToTrackSeek + c·√x, with c chosen so that
	// the mean over random pairs (E[√x] = 8/15) is AverageSeek; the full
	// stroke (x = 1) is then TrackToTrackSeek + c (15.1 ms by default).
	TrackToTrackSeek time.Duration
	AverageSeek      time.Duration
	// OuterRate and InnerRate are the media rates in bytes/s at the first
	// and the last byte (zoned recording: more sectors on the outer
	// tracks); the rate falls linearly with the offset in between. The
	// default inner rate, 102 MB/s, makes the mean over the disk the data
	// sheet's average data rate, 156 MB/s. Equal rates give one zone.
	OuterRate float64
	InnerRate float64
	// InterfaceRate (bytes/s) is the link: what a write into the cache and
	// a read served from it cost (SATA 6 Gb/s carries 600 MB/s).
	InterfaceRate float64
	// WriteCacheBytes is the volatile write cache: a write is acknowledged
	// once in it, written to the media when the drive is idle, when the
	// cache needs room, or on a cache flush (an FSYNC), which waits for all
	// of it. 0 makes every write go to the media before it is acknowledged.
	WriteCacheBytes int64
}

// DefaultModel is the Seagate Barracuda 7200.14 of Model's comment.
func DefaultModel() Model {
	return Model{
		RPM:              7200,
		TrackToTrackSeek: time.Millisecond,
		AverageSeek:      8500 * time.Microsecond,
		OuterRate:        210e6,
		InnerRate:        102e6,
		InterfaceRate:    600e6,
		WriteCacheBytes:  64 << 20,
	}
}

// ErrModel is returned (wrapped) for a model that is not a drive.
var ErrModel = errors.New("hddfs: invalid drive model")

// Validate says what is wrong with m, if anything.
func (m Model) Validate() error {
	switch {
	case !(m.RPM > 0):
		return fmt.Errorf("%w: RPM %v must be positive", ErrModel, m.RPM)
	case m.TrackToTrackSeek < 0:
		return fmt.Errorf("%w: track-to-track seek %v is negative", ErrModel, m.TrackToTrackSeek)
	case m.AverageSeek < m.TrackToTrackSeek:
		return fmt.Errorf("%w: average seek %v is below the track-to-track seek %v", ErrModel, m.AverageSeek, m.TrackToTrackSeek)
	case !(m.OuterRate > 0) || !(m.InnerRate > 0) || m.InnerRate > m.OuterRate:
		return fmt.Errorf("%w: media rates outer %v, inner %v B/s: want 0 < inner <= outer", ErrModel, m.OuterRate, m.InnerRate)
	case !(m.InterfaceRate > 0):
		return fmt.Errorf("%w: interface rate %v B/s must be positive", ErrModel, m.InterfaceRate)
	case m.WriteCacheBytes < 0:
		return fmt.Errorf("%w: write cache %d bytes is negative", ErrModel, m.WriteCacheBytes)
	}
	return nil
}

// Revolution is the time of one turn of the platters.
func (m Model) Revolution() time.Duration {
	return time.Duration(60 / m.RPM * 1e9)
}

// FullStrokeSeek is the seek across the whole disk that the seek curve
// implies (see TrackToTrackSeek).
func (m Model) FullStrokeSeek() time.Duration {
	return m.TrackToTrackSeek + time.Duration(m.seekCoef()*1e9)
}

// seekCoef is c of the seek curve, in seconds.
func (m Model) seekCoef() float64 {
	return (m.AverageSeek - m.TrackToTrackSeek).Seconds() * 15 / 8
}

// RandomReadIOPS is what the model predicts for random reads of n bytes
// over the whole disk at queue depth 1: one per average seek, half a
// revolution and the transfer at the mean media rate.
func (m Model) RandomReadIOPS(n int64) float64 {
	t := m.AverageSeek.Seconds() + m.Revolution().Seconds()/2 + float64(n)/((m.OuterRate+m.InnerRate)/2)
	return 1 / t
}

// String is the model in one line.
func (m Model) String() string {
	cache := "write cache off"
	if m.WriteCacheBytes > 0 {
		cache = fmt.Sprintf("%d MiB volatile write cache", m.WriteCacheBytes>>20)
	}
	return fmt.Sprintf("%.0f rpm (revolution %.2f ms), seek %.1f ms track-to-track / %.1f ms average / %.1f ms full stroke, media %.0f→%.0f MB/s outer→inner, interface %.0f MB/s, %s",
		m.RPM, ms(m.Revolution()), ms(m.TrackToTrackSeek), ms(m.AverageSeek), ms(m.FullStrokeSeek()),
		m.OuterRate/1e6, m.InnerRate/1e6, m.InterfaceRate/1e6, cache)
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// Stats counts what the drive did.
type Stats struct {
	Reads, Writes, Flushes int64
	CacheReads             int64         // reads served from the write cache
	Seeks                  int64         // head movements to another track
	SeekTime               time.Duration // total
	RotationTime           time.Duration // total rotational latency
	TransferTime           time.Duration // total media transfer
	DestagedBytes          int64         // written from the cache to the media
	FlushTime              time.Duration // total time FSYNCs waited for the media
}

type extent struct{ off, n int64 }

// Disk is the drive's state: where the head is, when it and the link are
// free, what the write cache holds. Times are durations since an origin
// the caller picks (the daemon's start); the platters' angle is a function
// of that time, so a request that arrives just after its sector passed
// waits almost a revolution, as on a drive. Not safe for concurrent use:
// the caller serializes (the head is one resource).
//
// Requests are served one at a time in arrival order (no command
// queueing). The write cache is written to the media in the background,
// in pieces of at most destageChunk, one after another from the moment
// data is in it, in elevator order from the head; a read that needs the
// head waits for the piece under way.
type Disk struct {
	m        Model
	capacity int64
	rev      float64 // seconds
	k        float64 // rate slope, bytes/s per byte

	head     int64         // the head is over this byte (end of the last media transfer)
	headFree time.Duration // the head is busy until then
	linkFree time.Duration // the drive answers no other command until then
	mediaEnd time.Duration // the last media transfer ended then, at head
	readyAt  time.Duration // the data of a cache that was empty arrived then
	lastRead bool          // the last media transfer was a read ending at head (read-ahead streams on)
	cache    []extent      // sorted, disjoint, not adjacent
	cached   int64
	stats    Stats
}

// destageChunk is the largest piece of the cache written in one go.
const destageChunk = 256 << 10

// NewDisk is a drive of capacity bytes (the whole stroke) following m.
func NewDisk(m Model, capacity int64) (*Disk, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("%w: capacity %d bytes must be positive", ErrModel, capacity)
	}
	return &Disk{m: m, capacity: capacity, rev: m.Revolution().Seconds(), k: (m.OuterRate - m.InnerRate) / float64(capacity)}, nil
}

// Stats returns the counters so far.
func (d *Disk) Stats() Stats { return d.stats }

// Cached is how many bytes the write cache holds.
func (d *Disk) Cached() int64 { return d.cached }

// rate is the media rate at off, bytes/s.
func (d *Disk) rate(off int64) float64 {
	return d.m.OuterRate - d.k*float64(d.clamp(off))
}

func (d *Disk) clamp(off int64) int64 { return min(max(off, 0), d.capacity) }

// revs is the number of revolutions the head makes reading from 0 to off:
// ∫ dx / (rate(x)·rev). Its integer part is the track, its fraction the
// sector's angle; a transfer from a to b takes rev·(revs(b) − revs(a)).
func (d *Disk) revs(off int64) float64 {
	x := float64(d.clamp(off))
	if d.k == 0 {
		return x / (d.m.OuterRate * d.rev)
	}
	return math.Log(d.m.OuterRate/d.rate(off)) / (d.k * d.rev)
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// transfer is the media time of [off, off+n).
func (d *Disk) transfer(off, n int64) time.Duration {
	return seconds(d.rev * (d.revs(off+n) - d.revs(off)))
}

// seek is the time to move the head from d.head to off's track.
func (d *Disk) seek(off int64) time.Duration {
	if math.Floor(d.revs(off)) == math.Floor(d.revs(d.head)) {
		return 0
	}
	x := math.Abs(float64(off-d.head)) / float64(d.capacity)
	return d.m.TrackToTrackSeek + seconds(d.m.seekCoef()*math.Sqrt(x))
}

// rotation is the wait at time t for off's sector to come under the head.
func (d *Disk) rotation(t time.Duration, off int64) time.Duration {
	f := d.revs(off) - t.Seconds()/d.rev
	f -= math.Floor(f)
	return seconds(f * d.rev)
}

// media moves the head to off at time t, transfers n bytes and returns
// when it is done; the head is busy until then. There is no positioning
// when stream (read-ahead) or when the transfer continues the previous one
// without a pause (sequential transfers cross tracks without losing a
// revolution: track skew, part of the sustained rate).
func (d *Disk) media(t time.Duration, off, n int64, stream bool) time.Duration {
	if !stream && !(off == d.head && t == d.mediaEnd) {
		if s := d.seek(off); s > 0 {
			d.stats.Seeks++
			d.stats.SeekTime += s
			t += s
		}
		r := d.rotation(t, off)
		d.stats.RotationTime += r
		t += r
	}
	x := d.transfer(off, n)
	d.stats.TransferTime += x
	d.head = d.clamp(off + n)
	d.headFree = t + x
	d.mediaEnd = d.headFree
	return d.headFree
}

func (d *Disk) iface(n int64) time.Duration {
	return seconds(float64(n) / d.m.InterfaceRate)
}

// Read is a read of [off, off+n) arriving at now; it returns when the
// drive has delivered it. A read the write cache holds entirely is served
// from it; one that continues the previous read streams (the drive reads
// ahead into its buffer); any other costs a seek, the rotation to its
// sector and the transfer.
func (d *Disk) Read(now time.Duration, off, n int64) time.Duration {
	d.stats.Reads++
	d.advance(now)
	t := max(now, d.linkFree)
	if d.inCache(off, n) {
		d.stats.CacheReads++
		d.linkFree = t + d.iface(n)
		return d.linkFree
	}
	d.linkFree = d.media(max(t, d.headFree), off, n, d.lastRead && off == d.head)
	d.lastRead = true
	return d.linkFree
}

// Write is a write of [off, off+n) arriving at now; it returns when the
// drive acknowledges it: once in the write cache (when the cache is full,
// once the background writing has made room), or, with no cache or a
// write larger than it, once on the media.
func (d *Disk) Write(now time.Duration, off, n int64) time.Duration {
	d.stats.Writes++
	d.advance(now)
	t := max(now, d.linkFree)
	if n > d.m.WriteCacheBytes {
		d.lastRead = false
		d.linkFree = d.media(max(t, d.headFree), off, n, false)
		return d.linkFree
	}
	for d.cached+n-d.overlap(off, n) > d.m.WriteCacheBytes {
		t = max(t, d.destage(d.cached+n-d.overlap(off, n)-d.m.WriteCacheBytes))
	}
	d.linkFree = t + d.iface(n)
	if d.cached == 0 {
		d.readyAt = d.linkFree // an idle head starts on the new data
	}
	d.insert(off, n)
	return d.linkFree
}

// Flush is a cache flush (FSYNC) arriving at now: it returns once every
// cached byte is on the media.
func (d *Disk) Flush(now time.Duration) time.Duration {
	d.stats.Flushes++
	d.advance(now)
	t := max(now, d.linkFree, d.destage(d.cached)) // and the piece under way
	d.stats.FlushTime += t - now
	d.linkFree = t
	return t
}

// advance runs the background writing of the cache up to now: every piece
// the head starts before now is written (it may end after now).
func (d *Disk) advance(now time.Duration) {
	for d.cached > 0 && max(d.headFree, d.readyAt) < now {
		d.destage(1)
	}
}

// destage writes at least want cached bytes (or all) in pieces from the
// head's next free moment, elevator order, and returns when the head is
// done with them.
func (d *Disk) destage(want int64) time.Duration {
	for want > 0 && d.cached > 0 {
		i := d.next()
		e := d.cache[i]
		n := min(e.n, destageChunk)
		d.lastRead = false
		d.media(max(d.headFree, d.readyAt), e.off, n, false)
		d.stats.DestagedBytes += n
		d.cached -= n
		if n == e.n {
			d.cache = slices.Delete(d.cache, i, i+1)
		} else {
			d.cache[i] = extent{e.off + n, e.n - n}
		}
		want -= n
	}
	return d.headFree
}

// next is the cache extent the elevator writes next: the first at or
// after the head, else the first (a one-way sweep).
func (d *Disk) next() int {
	i := d.first(d.head)
	if i == len(d.cache) {
		return 0
	}
	return i
}

// first is the index of the first extent ending after off.
func (d *Disk) first(off int64) int {
	i, _ := slices.BinarySearchFunc(d.cache, off, func(e extent, o int64) int {
		if e.off+e.n <= o {
			return -1
		}
		return 1
	})
	return i
}

func (d *Disk) overlap(off, n int64) int64 {
	var o int64
	for i := d.first(off); i < len(d.cache) && d.cache[i].off < off+n; i++ {
		e := d.cache[i]
		o += min(e.off+e.n, off+n) - max(e.off, off)
	}
	return o
}

func (d *Disk) inCache(off, n int64) bool {
	i := d.first(off)
	return i < len(d.cache) && d.cache[i].off <= off && d.cache[i].off+d.cache[i].n >= off+n
}

// insert adds [off, off+n) to the cache, merging what it touches.
func (d *Disk) insert(off, n int64) {
	lo, hi := off, off+n
	i := d.first(off - 1) // an extent ending at off merges too
	j := i
	for j < len(d.cache) && d.cache[j].off <= hi {
		e := d.cache[j]
		lo, hi = min(lo, e.off), max(hi, e.off+e.n)
		d.cached -= e.n
		j++
	}
	d.cache = slices.Replace(d.cache, i, j, extent{lo, hi - lo})
	d.cached += hi - lo
}
