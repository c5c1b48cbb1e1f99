package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/cli"
)

type ack struct {
	I              int64  `json:"i"`
	Topic          string `json:"topic"`
	QueueID        int32  `json:"queueId"`
	QueueOffset    int64  `json:"queueOffset"`
	PhysicalOffset int64  `json:"physicalOffset"`
	Size           int    `json:"size"`
	UniqKey        string `json:"uniqKey"`
	Status         string `json:"status,omitempty"`
}

// Body returns the deterministic body of message i: size bytes of an
// xorshift stream seeded by the index, so a reader can check any message.
func Body(i int64, size int) []byte {
	b := make([]byte, size)
	x := uint64(i)*0x9E3779B97F4A7C15 + 1
	for j := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[j] = byte(x)
	}
	return b
}

func runProduce(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory (required)")
	topic := fs.String("topic", "", "topic (required)")
	queues := fs.Int("queues", 1, "queue ids 0..N-1, used round robin")
	count := fs.Int64("count", 1000, "messages to append")
	size := fs.Int("size", 1024, "body size in bytes")
	tags := fs.String("tags", "", "TAGS property of every message")
	keys := fs.Bool("keys", false, "set KEYS = k<index>")
	backend := fs.String("backend", "mmap", "I/O backend: "+strings.Join(engine.BackendNames(), ", "))
	flush := fs.String("flush", "async", "flush mode: async or sync")
	segmentSize := fs.Int64("segment-size", 0, "CommitLog segment size in bytes for a new store (default 1 GiB; must match an existing store)")
	printAcks := fs.Bool("print-acks", false, "print one JSON line per acknowledged message")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore produce --dir DIR --topic T [--queues N] [--count N] [--size BYTES] [--tags TAG] [--keys]\n       [--backend NAME] [--flush async|sync] [--segment-size BYTES] [--print-acks]")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir", "topic"); err != nil {
		return err
	}
	switch {
	case *queues < 1:
		return cli.BadFlag(fs, "--queues must be at least 1, got %d", *queues)
	case *count < 0:
		return cli.BadFlag(fs, "--count must not be negative, got %d", *count)
	case *size < 0:
		return cli.BadFlag(fs, "--size must not be negative, got %d", *size)
	}
	mode, err := engine.ParseFlushMode(*flush)
	if err != nil {
		return cli.BadFlag(fs, "--flush: %v", err)
	}
	store, err := engine.Open(ctx, *dir, engine.Options{Backend: *backend, FlushMode: mode, SegmentSizeBytes: *segmentSize})
	if err != nil {
		return err
	}
	start := time.Now()
	n, bytes, err := produce(ctx, store, *topic, int32(*queues), *count, *size, *tags, *keys, *printAcks, stdout)
	elapsed := time.Since(start)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	fmt.Fprintf(stderr, "produced %d messages, %.1f MB in %.2fs: %.0f msgs/s, %.1f MB/s\n",
		n, float64(bytes)/1e6, elapsed.Seconds(), float64(n)/elapsed.Seconds(), float64(bytes)/1e6/elapsed.Seconds())
	return err
}

func produce(ctx context.Context, store *engine.Store, topic string, queues int32, count int64, size int,
	tags string, keys, printAcks bool, stdout io.Writer) (int64, int64, error) {
	runID := fmt.Sprintf("%08X%012X", os.Getpid(), time.Now().UnixMilli())
	enc := json.NewEncoder(stdout)
	var bytes int64
	for i := int64(0); i < count; i++ {
		if err := ctx.Err(); err != nil {
			return i, bytes, err
		}
		uniq := fmt.Sprintf("%s%012X", runID, i)
		props := make([]engine.Property, 0, 3)
		if tags != "" {
			props = append(props, engine.Property{Name: "TAGS", Value: tags})
		}
		if keys {
			props = append(props, engine.Property{Name: "KEYS", Value: fmt.Sprintf("k%d", i)})
		}
		props = append(props, engine.Property{Name: "UNIQ_KEY", Value: uniq})
		m := &engine.Message{Topic: topic, QueueID: int32(i % int64(queues)), Body: Body(i, size), Properties: props}
		res, err := store.Put(ctx, m)
		if err != nil {
			return i, bytes, fmt.Errorf("message %d: %w", i, err)
		}
		bytes += int64(res.Size)
		if printAcks {
			a := ack{I: i, Topic: topic, QueueID: m.QueueID, QueueOffset: res.QueueOffset, PhysicalOffset: res.PhysicalOffset, Size: res.Size, UniqKey: uniq}
			if err := enc.Encode(a); err != nil { // one write per line: the ack is out before the next Put
				return i + 1, bytes, fmt.Errorf("print ack: %w", err)
			}
		}
	}
	return count, bytes, nil
}
