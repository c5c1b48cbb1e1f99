package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/mappedfile"
)

// Damage FuzzRecoveryScan does to one of the records it writes.
const (
	damageNone    = iota
	damageBody    // flip bits of one body byte: a wrong BODYCRC
	damageBodyCRC // flip bits of the BODYCRC field
	damageAnyByte // flip bits of any one byte of the record
	damageKinds
)

// FuzzRecoveryScan writes up to 7 valid records into a segment, damages
// one of them as the input says, puts arbitrary bytes after them, and runs
// the recovery scanner. The valid end it finds is checked from both sides:
//
//   - never before the damaged record, nor before the end of the records
//     when none was damaged: nothing valid is lost;
//
//   - a record whose body no longer matches its BODYCRC (checked here with
//     hash/crc32, not with the codec) is cut exactly there; a record damaged
//     elsewhere is either cut there or accepted whole;
//
//   - every record accepted is valid at its own offset, and where the scan
//     stops there is no valid record: it did not stop early.
//
//     go test ./engine -run '^$' -fuzz FuzzRecoveryScan -fuzztime 60s
func FuzzRecoveryScan(f *testing.F) {
	f.Add(uint8(3), uint8(0), uint8(damageNone), uint16(0), []byte{})
	f.Add(uint8(4), uint8(2), uint8(damageBody), uint16(0x0305), []byte{}) // a wrong CRC: cut at record 2
	f.Add(uint8(4), uint8(1), uint8(damageBodyCRC), uint16(0x0102), []byte{})
	f.Add(uint8(5), uint8(4), uint8(damageAnyByte), uint16(0x8017), []byte{})
	f.Add(uint8(1), uint8(0), uint8(damageNone), uint16(0), []byte{0, 0, 0, 91, 0xDA, 0xA3, 0x20, 0xA7})
	f.Add(uint8(0), uint8(0), uint8(damageNone), uint16(0), bytes.Repeat([]byte{0xFF}, 64))
	f.Add(uint8(5), uint8(0), uint8(damageNone), uint16(0), []byte{0, 0, 0, 8, 0xCB, 0xD4, 0x31, 0x94})
	f.Fuzz(func(t *testing.T, records, victim, damage uint8, where uint16, tail []byte) {
		const size = 16 << 10
		ctx := context.Background()
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		q, err := segment.Open(ctx, segment.Config{Dir: "/f/commitlog", Backend: fs, SegmentSizeBytes: size})
		if err != nil {
			t.Fatal(err)
		}
		c := &commitLog{queue: q, segmentSizeBytes: size, maxRecordBytes: size - 16, queueOffsets: map[queueKey]*queueCounter{}}
		c.crcFrom.Store(-1)
		var starts, ends []int64
		for i := 0; i < int(records%8); i++ {
			m := &Message{Topic: "F", Body: bytes.Repeat([]byte{byte(i)}, 10+i*37), Properties: []Property{{Name: "K", Value: "v"}}}
			props, _ := record.EncodeProperties(nil, m.Properties)
			e := &encodeBuffer{size: record.Size(m, len(props))}
			e.buf = make([]byte, e.size)
			if err := record.Encode(e.buf, m, props); err != nil {
				t.Fatal(err)
			}
			res, err := c.appendLocked(ctx, e, c.counterLocked(queueKey{"F", 0}), 0, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			starts = append(starts, res.physicalOffset)
			ends = append(ends, res.physicalOffset+int64(res.size))
		}
		mf := q.Last()
		if mf == nil {
			if mf, err = q.NextForAppend(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
		allEnd := int64(0)
		if len(ends) > 0 {
			allEnd = ends[len(ends)-1]
		}
		// Damage one record.
		kind := int(damage % damageKinds)
		v, cutAt := -1, int64(-1) // the damaged record; where the scan must stop (-1: not fixed)
		if len(starts) > 0 && kind != damageNone {
			v = int(victim) % len(starts)
			rec := make([]byte, ends[v]-starts[v])
			if _, err := mf.ReadAt(rec, starts[v]); err != nil {
				t.Fatal(err)
			}
			mask := byte(where>>8) | 1
			const bodyAt = 88 // v1 with IPv4 hosts: BODYLENGTH at 84, then the body (docs/formats.md)
			bodyLen := 10 + v*37
			switch kind {
			case damageBody:
				rec[bodyAt+int(where)%bodyLen] ^= mask
			case damageBodyCRC:
				rec[record.OffBodyCRC+int(where)%4] ^= mask
			case damageAnyByte:
				rec[int(where)%len(rec)] ^= mask
			}
			if _, err := mf.(mappedfile.Overwriter).WriteAt(rec, starts[v]); err != nil {
				t.Fatal(err)
			}
			body := rec[bodyAt : bodyAt+bodyLen]
			if int32(crc32.ChecksumIEEE(body)&0x7FFFFFFF) != int32(binary.BigEndian.Uint32(rec[record.OffBodyCRC:])) {
				cutAt = starts[v] // a wrong CRC: this record must go, and everything after it
			}
		}
		if n := min(len(tail), int(mf.SizeBytes()-mf.WrotePosition())); n > 0 {
			if _, err := mf.Append(n, mappedfile.Bytes(tail[:n])); err != nil {
				t.Fatal(err)
			}
		}
		var accepted []int64
		end, err := c.scan(ctx, 0, func(offset int64, rec []byte, r *record.Record) error {
			if r == nil {
				return nil
			}
			if r.PhysicalOffset != offset {
				t.Fatalf("accepted a record claiming offset %d at %d", r.PhysicalOffset, offset)
			}
			if !validAt(rec, offset) {
				t.Fatalf("accepted an invalid record at %d", offset)
			}
			accepted = append(accepted, offset)
			return nil
		})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		// From below: nothing valid before the damage is lost.
		lower := allEnd
		if v >= 0 {
			lower = starts[v]
		}
		if end.validEnd < lower {
			t.Fatalf("scan stopped at %d, before %d (damage %d to record %d of %d)", end.validEnd, lower, kind, v, len(starts))
		}
		// From above: a wrong CRC is cut exactly there; other damage is cut
		// there or accepted with the whole record.
		switch {
		case cutAt >= 0 && end.validEnd != cutAt:
			t.Fatalf("record %d has a wrong BODYCRC; the scan ended at %d, not at %d", v, end.validEnd, cutAt)
		case v >= 0 && end.validEnd != starts[v] && end.validEnd < allEnd:
			t.Fatalf("damaged record %d at %d: the scan ended at %d, inside the records", v, starts[v], end.validEnd)
		}
		// And it did not stop early: no valid record where it stopped.
		if readable := mf.FromOffset() + mf.ReadablePosition(); end.validEnd >= allEnd && end.validEnd < readable {
			rest := make([]byte, readable-end.validEnd)
			if n, _ := mf.ReadAt(rest, end.validEnd-mf.FromOffset()); n == len(rest) && n >= 4 {
				if total := int(int32(binary.BigEndian.Uint32(rest))); total >= record.MinRecordSize && total <= len(rest) && validAt(rest[:total], end.validEnd) {
					t.Fatalf("the scan stopped at %d, where a valid record of %d bytes is", end.validEnd, total)
				}
			}
		}
	})
}

// validAt is the fuzz target's own check of a record at offset: it
// decodes, its PHYSICALOFFSET is offset, its BODYCRC matches its body
// (hash/crc32), and its end is whole (properties end with 0x02; a topic has
// no zero byte).
func validAt(rec []byte, offset int64) bool {
	r, err := record.Decode(rec, offset, false)
	if err != nil || r.PhysicalOffset != offset || int(r.TotalSize) != len(rec) {
		return false
	}
	if int32(crc32.ChecksumIEEE(r.Body)&0x7FFFFFFF) != r.BodyCRC {
		return false
	}
	if len(r.Properties) > 0 {
		return rec[len(rec)-1] == 0x02
	}
	return !strings.ContainsRune(r.Topic, 0)
}
