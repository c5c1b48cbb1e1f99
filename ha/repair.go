package ha

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
)

// Divergence is where a slave's CommitLog parts from its master's.
type Divergence struct {
	// Diverged: the slave holds bytes the master does not have at the
	// same offsets (it is ahead, or differs).
	Diverged bool
	// Offset is the first of the slave's records (or blanks) that the
	// master does not have byte for byte: where the slave must be cut.
	// Without divergence it is the slave's end.
	Offset int64
	// SlaveEnd is where the slave's CommitLog ends.
	SlaveEnd int64
	// Probes is how many connections to the master the search took.
	Probes int
}

// FindDivergence finds where store's CommitLog parts from the master's at
// masterAddr, by a binary search over the slave's records: each probe
// connects as a slave would, reports the record's offset, and compares the
// master's bytes there with the slave's record (a connection per probe,
// about log2 of the segments plus log2 of the records in one). The store
// must not be replicating (mqstore repair-slave opens it for this). A
// probe is a short-lived slave connection to the master; while it lasts, a
// SYNC_MASTER Put may count it as a slave and wait for it.
func FindDivergence(ctx context.Context, store *engine.Store, masterAddr string, opts SlaveOptions) (Divergence, error) {
	opts.MasterAddress = masterAddr
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return Divergence{}, err
	}
	p := &prober{store: store, own: store.CommitLogReader(), opts: o}
	start, end := store.MinOffset(), store.MaxOffset()
	d := Divergence{Offset: end, SlaveEnd: end}
	if end <= start {
		return d, nil // nothing to compare
	}
	seg := p.own.SegmentSizeBytes()
	var segs []int64
	for off := start; off < end; off = off - off%seg + seg {
		segs = append(segs, off)
	}
	// The last segment whose first unit the master has (units before the
	// divergence match, those after it do not).
	var probeErr error
	j := sort.Search(len(segs), func(i int) bool {
		same, err := p.probe(ctx, segs[i])
		if err != nil && probeErr == nil {
			probeErr = err
		}
		return !same
	}) - 1
	if probeErr != nil {
		return d, probeErr
	}
	d.Probes = p.probes
	if j < 0 {
		d.Diverged, d.Offset = true, segs[0]
		return d, nil
	}
	// Within segment j, the first unit the master does not have.
	segEnd := min(segs[j]-segs[j]%seg+seg, end)
	units, err := p.units(ctx, segs[j], segEnd)
	if err != nil {
		return d, err
	}
	k := sort.Search(len(units), func(i int) bool {
		same, err := p.probe(ctx, units[i])
		if err != nil && probeErr == nil {
			probeErr = err
		}
		return !same
	})
	d.Probes = p.probes
	if probeErr != nil {
		return d, probeErr
	}
	switch {
	case k < len(units):
		d.Offset = units[k]
	case j+1 < len(segs):
		d.Offset = segs[j+1] // segment j matched whole; the next one's first unit did not
	default:
		return d, nil // every unit matches: the slave is a prefix of the master
	}
	d.Diverged = d.Offset < end
	return d, nil
}

type prober struct {
	store  *engine.Store
	own    *engine.CommitLogReader
	opts   SlaveOptions
	probes int
}

// units lists the offsets of the slave's records and blanks in [from, to).
func (p *prober) units(ctx context.Context, from, to int64) ([]int64, error) {
	var out []int64
	_, err := p.store.Scan(ctx, from, func(offset int64, _ []byte, _ *record.Record) error {
		if offset >= to {
			return engine.ErrStopScan
		}
		out = append(out, offset)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the slave's records in [%d,%d): %w", from, to, err)
	}
	return out, nil
}

// unitAt reads the slave's record (or blank, to its segment end) at offset.
func (p *prober) unitAt(offset int64) ([]byte, error) {
	head := make([]byte, record.BlankSize)
	if n, err := p.own.ReadAt(head, offset); n != len(head) {
		return nil, fmt.Errorf("read the slave's CommitLog at %d: %w", offset, err)
	}
	size := int64(binary.BigEndian.Uint32(head))
	if int32(binary.BigEndian.Uint32(head[record.OffMagic:])) == record.MagicBlank {
		seg := p.own.SegmentSizeBytes()
		size = seg - offset%seg
	}
	unit := make([]byte, size)
	if n, err := p.own.ReadAt(unit, offset); int64(n) != size {
		return nil, fmt.Errorf("read the slave's CommitLog at %d: %w", offset, err)
	}
	return unit, nil
}

// probe reports whether the master holds, at offset, the same bytes as
// the slave's unit there. A master whose CommitLog ends at or before
// offset does not; one that starts after it cannot say, and counts as the
// same (the divergence is later).
func (p *prober) probe(ctx context.Context, offset int64) (bool, error) {
	p.probes++
	unit, err := p.unitAt(offset)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.HousekeepingInterval)
	defer cancel()
	c, err := dialMaster(ctx, p.opts)
	if err != nil {
		return false, fmt.Errorf("probe: %w", err)
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		c.SetDeadline(deadline)
	}
	var b [reportSize]byte
	binary.BigEndian.PutUint64(b[:], uint64(offset))
	if _, err := c.Write(b[:]); err != nil {
		return false, fmt.Errorf("probe the master %s: %w", p.opts.MasterAddress, err)
	}
	br := bufio.NewReader(c)
	var got []byte
	next := offset
	for len(got) < len(unit) {
		var hdr [headerSize]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return false, fmt.Errorf("probe the master %s at %d: %w", p.opts.MasterAddress, offset, err)
		}
		at, size := parseHeader(hdr[:])
		switch {
		case size < 0 || int(size) > p.opts.MaxFrameBytes:
			return false, fmt.Errorf("probe the master %s: a frame header for %d bytes: %w", p.opts.MasterAddress, size, ErrProtocol)
		case size == 0 && at > next && len(got) == 0:
			return true, nil // the master starts after offset
		case size == 0:
			return false, nil // the master ends at or before the unit's end
		case at != next:
			if offset == 0 && len(got) == 0 && at > 0 {
				// 0 means "empty" to a master, which started this probe
				// where it starts empty slaves: offset 0 cannot be compared.
				return true, nil
			}
			return false, fmt.Errorf("probe the master %s: a frame at %d, expected %d: %w", p.opts.MasterAddress, at, next, ErrProtocol)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(br, body); err != nil {
			return false, fmt.Errorf("probe the master %s at %d: %w", p.opts.MasterAddress, offset, err)
		}
		got = append(got, body...)
		next += int64(size)
	}
	return bytes.Equal(got[:len(unit)], unit), nil
}
