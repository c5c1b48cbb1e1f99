package record

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzDecode: Decode and Peek never panic, every error is a *DecodeError
// wrapping ErrCorrupt or ErrTooShort, and every record Decode accepts
// re-encodes (Encode of its fields + Patch) to exactly the bytes it was read
// from. The seed corpus is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	m := baseMessage()
	f.Add(encodeMessage(f, &m, 1, 2, 3))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, _, err := Peek(data, 0, 1<<22); err != nil {
			checkErrorKind(t, err)
		}
		r, err := Decode(data, 0, true)
		if err != nil {
			checkErrorKind(t, err)
			return
		}
		if int(r.TotalSize) > len(data) {
			t.Fatalf("accepted TotalSize %d with %d bytes", r.TotalSize, len(data))
		}
		kind, size, err := Peek(data, 0, 0)
		if err != nil || kind != KindRecord || size != r.TotalSize {
			t.Fatalf("Decode accepted what Peek calls %v %d %v", kind, size, err)
		}
		reencodeAndCompare(t, &r, data[:r.TotalSize])
	})
}

func checkErrorKind(t *testing.T, err error) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) || (!errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooShort)) {
		t.Fatalf("error %v (%T) is not a *DecodeError wrapping ErrCorrupt or ErrTooShort", err, err)
	}
}

// reencodeAndCompare encodes the decoded fields again and compares.
func reencodeAndCompare(t *testing.T, r *Record, original []byte) {
	t.Helper()
	m := Message{
		Topic:                     r.Topic,
		QueueID:                   r.QueueID,
		Flag:                      r.Flag,
		SysFlag:                   r.SysFlag,
		BornTimestamp:             r.BornTimestamp,
		BornHost:                  r.BornHost,
		StoreHost:                 r.StoreHost,
		ReconsumeTimes:            r.ReconsumeTimes,
		PreparedTransactionOffset: r.PreparedTransactionOffset,
		Body:                      r.Body,
	}
	size := Size(&m, len(r.Properties))
	if size != len(original) {
		t.Fatalf("Size of the decoded record = %d, TOTALSIZE %d", size, len(original))
	}
	again := make([]byte, size)
	if err := Encode(again, &m, r.Properties); err != nil {
		t.Fatalf("Encode of an accepted record: %v", err)
	}
	Patch(again, r.QueueOffset, r.PhysicalOffset, r.StoreTimestamp)
	if !bytes.Equal(again, original) {
		t.Fatalf("re-encoded record differs:\n got % X\nwant % X", again, original)
	}
}

// TestFuzzSeedsDecode keeps the fuzz target honest: the valid_* seeds must
// decode (so the re-encoding check runs on them) and the others must not.
func TestFuzzSeedsDecode(t *testing.T) {
	paths, err := filepath.Glob("testdata/fuzz/FuzzDecode/*")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seed corpus: %v", err)
	}
	for _, path := range paths {
		content, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(content)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: unexpected format", path)
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r, err := Decode([]byte(data), 0, true)
		if wantValid := strings.HasPrefix(filepath.Base(path), "valid_"); wantValid != (err == nil) {
			t.Fatalf("%s: Decode error %v, want valid=%v", path, err, wantValid)
		}
		if err == nil {
			reencodeAndCompare(t, &r, []byte(data)[:r.TotalSize])
		}
	}
}
