//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"produce", "--topic", "T"},
		{"produce", "--dir", "x"},
		{"produce", "--dir", "x", "--topic", "T", "--queues", "0"},
		{"produce", "--dir", "x", "--topic", "T", "--queues", "4294967296"},
		{"consume", "--dir", "x", "--topic", "T", "--queue", "3000000000"},
		{"produce", "--dir", "x", "--topic", "T", "--flush", "sometimes"},
		{"produce", "--dir", "x", "--topic", "T", "--nope"},
		{"produce", "--dir", "x", "--topic", "T", "--recycle-segments", "-1"},
		{"serve", "--dir", "x", "--role", "async-master", "--recycle-segments", "-2"},
		{"serve", "--dir", "x", "--role", "async-master", "--delete-when", "25"},
		{"serve", "--dir", "x", "--role", "async-master", "--delete-when", "4;x"},
		{"serve", "--dir", "x", "--role", "async-master", "--file-reserved-time", "0s"},
		{"serve", "--dir", "x", "--broker-set", "s", "--broker-id", "1", "--controller-peers", "127.0.0.1:1", "--clean-interval", "-1s"},
		{"slave", "--dir", "x", "--master", "127.0.0.1:1", "--disk-max-used-ratio", "0"},
		{"produce", "--dir", "x", "--topic", "T", "--disk-max-used-ratio", "101"},
		{"dump"},
		{"dump", "--dir", "x", "--max", "-1"},
		{"consume", "--dir", "x", "--topic", "T"},
		{"query", "--dir", "x", "--topic", "T"},
		{"query", "--dir", "x", "--topic", "T", "--key", "a", "--uniq-key", "b"},
		{"verify"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, "usage") {
			t.Errorf("mqstore %v: exit %d, stderr %q; want 2 and the usage", args, code, stderr)
		}
	}
}

func TestErrorsExit1(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runCLI(t, "dump", "--dir", dir)
	if code != 1 || !strings.Contains(stderr, "not an mqstore store") {
		t.Errorf("dump of an empty dir: %d %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "produce", "--dir", dir, "--topic", "bad topic", "--count", "1")
	if code != 1 || !strings.Contains(stderr, "topic") {
		t.Errorf("bad topic: %d %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "produce", "--dir", dir, "--topic", "T", "--count", "1", "--segment-size", "65536")
	if code != 1 || !strings.Contains(stderr, "segment") {
		t.Errorf("other segment size: %d %q", code, stderr)
	}
}

func TestProduceDumpConsumeQueryContract(t *testing.T) {
	dir := t.TempDir()
	out, stderr, code := runCLI(t, "produce", "--dir", dir, "--topic", "T", "--queues", "4", "--count", "2000", "--size", "512",
		"--tags", "A", "--keys", "--segment-size", "65536", "--print-acks")
	if code != 0 {
		t.Fatalf("produce: %d %s", code, stderr)
	}
	if !strings.Contains(stderr, "msgs/s") {
		t.Errorf("no summary on stderr: %q", stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2000 {
		t.Fatalf("%d ack lines", len(lines))
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"i", "topic", "queueId", "queueOffset", "physicalOffset", "size", "uniqKey"} {
		if _, ok := first[k]; !ok {
			t.Errorf("ack lacks %q: %s", k, lines[0])
		}
	}
	out, _, code = runCLI(t, "dump", "--dir", dir)
	if code != 0 {
		t.Fatal("dump failed")
	}
	records, blanks := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		switch m["type"] {
		case "record":
			records++
			for _, k := range []string{"physicalOffset", "size", "topic", "queueId", "queueOffset", "bodyCRC", "bodyLen", "storeTimestamp", "bornTimestamp", "tags", "keys", "uniqKey", "properties"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("dump line lacks %q: %s", k, l)
				}
			}
		case "blank":
			blanks++
		}
	}
	if records != 2000 || blanks < 10 {
		t.Fatalf("dump: %d records, %d blanks", records, blanks)
	}
	for q := 0; q < 4; q++ {
		out, stderr, code := runCLI(t, "consume", "--dir", dir, "--topic", "T", "--queue", fmt.Sprint(q))
		if code != 0 {
			t.Fatalf("consume: %s", stderr)
		}
		ls := strings.Split(strings.TrimSpace(out), "\n")
		if len(ls) != 500 {
			t.Fatalf("queue %d: %d messages", q, len(ls))
		}
		for i, l := range ls {
			var r recordLine
			json.Unmarshal([]byte(l), &r)
			if r.QueueOffset != int64(i) || r.QueueID != int32(q) {
				t.Fatalf("queue %d line %d: offset %d", q, i, r.QueueOffset)
			}
		}
		if !strings.Contains(stderr, `"status":"OFFSET_OVERFLOW_ONE"`) || !strings.Contains(stderr, `"maxOffset":500`) {
			t.Errorf("consume summary: %s", stderr)
		}
	}
	out, _, code = runCLI(t, "query", "--dir", dir, "--topic", "T", "--key", "k1234")
	var r recordLine
	if code != 0 || json.Unmarshal([]byte(strings.TrimSpace(out)), &r) != nil || r.Keys[0] != "k1234" || r.QueueOffset != 1234/4 {
		t.Fatalf("query k1234: %d %s", code, out)
	}
	if out, _, code := runCLI(t, "verify", "--dir", dir); code != 0 || !strings.Contains(out, "0 problems") {
		t.Fatalf("verify: %d %s", code, out)
	}
}
