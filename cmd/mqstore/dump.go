package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/cli"
)

// recordLine is the JSON form of a CommitLog record (dump, consume, query).
type recordLine struct {
	Type           string            `json:"type"`
	PhysicalOffset int64             `json:"physicalOffset"`
	Size           int32             `json:"size"`
	Topic          string            `json:"topic,omitempty"`
	QueueID        int32             `json:"queueId"`
	QueueOffset    int64             `json:"queueOffset"`
	BodyCRC        int32             `json:"bodyCRC"`
	BodyLen        int               `json:"bodyLen"`
	StoreTimestamp int64             `json:"storeTimestamp"`
	BornTimestamp  int64             `json:"bornTimestamp"`
	BornHost       string            `json:"bornHost,omitempty"`
	StoreHost      string            `json:"storeHost,omitempty"`
	Flag           int32             `json:"flag"`
	SysFlag        int32             `json:"sysFlag"`
	ReconsumeTimes int32             `json:"reconsumeTimes"`
	Tags           string            `json:"tags"`
	Keys           []string          `json:"keys"`
	UniqKey        string            `json:"uniqKey"`
	Properties     map[string]string `json:"properties"`
	Body           []byte            `json:"body,omitempty"`
}

func lineOf(r *record.Record, withBody bool) recordLine {
	l := recordLine{Type: "record", PhysicalOffset: r.PhysicalOffset, Size: r.TotalSize, Topic: r.Topic, QueueID: r.QueueID,
		QueueOffset: r.QueueOffset, BodyCRC: r.BodyCRC, BodyLen: len(r.Body), StoreTimestamp: r.StoreTimestamp,
		BornTimestamp: r.BornTimestamp, BornHost: r.BornHost.String(), StoreHost: r.StoreHost.String(),
		Flag: r.Flag, SysFlag: r.SysFlag, ReconsumeTimes: r.ReconsumeTimes, Keys: r.Keys(), Properties: map[string]string{}}
	l.Tags, _ = r.Tags()
	l.UniqKey, _ = r.UniqKey()
	if l.Keys == nil {
		l.Keys = []string{}
	}
	if props, err := record.ParseProperties(r.Properties); err == nil {
		for _, p := range props {
			l.Properties[p.Name] = p.Value
		}
	}
	if withBody {
		l.Body = r.Body
	}
	return l
}

// openExisting opens a store that must already exist, for a command that
// reads it: no retention (a read never deletes a segment).
func openExisting(ctx context.Context, dir string) (*engine.Store, error) {
	return openExistingWith(ctx, dir, engine.Options{NoPreallocate: true, NoRetention: true})
}

// openExistingWith opens a store that must already exist with options.
func openExistingWith(ctx context.Context, dir string, o engine.Options) (*engine.Store, error) {
	if _, err := os.Stat(filepath.Join(dir, "mqstore.json")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not an mqstore store (no mqstore.json)", dir)
		}
		return nil, err
	}
	return engine.Open(ctx, dir, o)
}

// backendList names the backends for flag help.
func backendList() string { return strings.Join(engine.BackendNames(), ", ") }

func runDump(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory (required)")
	from := fs.Int64("from", -1, "CommitLog offset of the first record (a record boundary; default: the first stored)")
	maxN := fs.Int64("max", 0, "stop after this many records (0: all)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore dump --dir DIR [--from PHYSICAL_OFFSET] [--max N]")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir"); err != nil {
		return err
	}
	if *maxN < 0 {
		return cli.BadFlag(fs, "--max must not be negative, got %d", *maxN)
	}
	store, err := openExisting(ctx, *dir)
	if err != nil {
		return err
	}
	defer store.Close()
	start := *from
	if start < 0 {
		start = store.MinOffset()
	}
	if start < store.MinOffset() || start > store.MaxOffset() {
		return fmt.Errorf("--from %d is outside the stored range [%d, %d]", start, store.MinOffset(), store.MaxOffset())
	}
	enc := json.NewEncoder(stdout)
	var records, blanks int64
	end, err := store.Scan(ctx, start, func(offset int64, rec []byte, r *record.Record) error {
		if r == nil {
			blanks++
			return enc.Encode(map[string]any{"type": "blank", "physicalOffset": offset, "size": int32(len(rec)) + remainingBlank(rec)})
		}
		if *maxN > 0 && records >= *maxN {
			return engine.ErrStopScan
		}
		records++
		return enc.Encode(lineOf(r, false))
	})
	if err != nil {
		return fmt.Errorf("after %d records, at offset %d: %w", records, end, err)
	}
	fmt.Fprintf(stderr, "%d records, %d blanks, offsets [%d, %d)\n", records, blanks, start, end)
	return nil
}

// remainingBlank returns TOTALSIZE of a blank minus its 8 bytes.
func remainingBlank(rec []byte) int32 {
	total := int32(uint32(rec[0])<<24 | uint32(rec[1])<<16 | uint32(rec[2])<<8 | uint32(rec[3]))
	return total - int32(len(rec))
}
