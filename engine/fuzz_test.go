package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/mappedfile"
)

// FuzzRecoveryScan puts arbitrary bytes after a valid prefix of records in a
// segment and runs the recovery scanner: it must never panic, must keep the
// whole valid prefix, and must accept nothing after it that is not a valid
// record at its own offset.
//
//	go test ./engine -run '^$' -fuzz FuzzRecoveryScan -fuzztime 60s
func FuzzRecoveryScan(f *testing.F) {
	f.Add(uint8(3), []byte{})
	f.Add(uint8(1), []byte{0, 0, 0, 91, 0xDA, 0xA3, 0x20, 0xA7})
	f.Add(uint8(0), bytes.Repeat([]byte{0xFF}, 64))
	f.Add(uint8(5), []byte{0, 0, 0, 8, 0xCB, 0xD4, 0x31, 0x94})
	f.Fuzz(func(t *testing.T, records uint8, tail []byte) {
		const size = 16 << 10
		ctx := context.Background()
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		q, err := segment.Open(ctx, segment.Config{Dir: "/f/commitlog", Backend: fs, SegmentSizeBytes: size})
		if err != nil {
			t.Fatal(err)
		}
		c := &commitLog{queue: q, segmentSizeBytes: size, maxRecordBytes: size - 16, queueOffsets: map[queueKey]int64{}}
		var ends []int64
		for i := 0; i < int(records%8); i++ {
			m := &Message{Topic: "F", Body: bytes.Repeat([]byte{byte(i)}, 10+i*37), Properties: []Property{{Name: "K", Value: "v"}}}
			props, _ := record.EncodeProperties(nil, m.Properties)
			e := &encodeBuffer{size: record.Size(m, len(props))}
			e.buf = make([]byte, e.size)
			if err := record.Encode(e.buf, m, props); err != nil {
				t.Fatal(err)
			}
			res, err := c.appendLocked(ctx, e, queueKey{"F", 0}, 0, time.Now)
			if err != nil {
				t.Fatal(err)
			}
			ends = append(ends, res.physicalOffset+int64(res.size))
		}
		prefix := int64(0)
		if len(ends) > 0 {
			prefix = ends[len(ends)-1]
		}
		mf := q.Last()
		if mf == nil {
			var err error
			if mf, err = q.NextForAppend(ctx, 0); err != nil {
				t.Fatal(err)
			}
		}
		if n := min(len(tail), int(mf.SizeBytes()-mf.WrotePosition())); n > 0 {
			if _, err := mf.Append(n, mappedfile.Bytes(tail[:n])); err != nil {
				t.Fatal(err)
			}
		}
		seen := 0
		end, err := c.scan(ctx, 0, func(offset int64, rec []byte, r *record.Record) error {
			if r == nil {
				return nil
			}
			if seen < len(ends) && offset+int64(r.TotalSize) != ends[seen] {
				t.Fatalf("record %d of the prefix read at %d", seen, offset)
			}
			if r.PhysicalOffset != offset {
				t.Fatalf("accepted a record claiming offset %d at %d", r.PhysicalOffset, offset)
			}
			if _, derr := record.Decode(rec, offset, true); derr != nil {
				t.Fatalf("accepted an invalid record at %d: %v", offset, derr)
			}
			seen++
			return nil
		})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		if end.validEnd < prefix || seen < len(ends) {
			t.Fatalf("scan lost the valid prefix: end %d < %d, %d of %d records", end.validEnd, prefix, seen, len(ends))
		}
	})
}
