package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/cli"
)

func runConsume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory (required)")
	topic := fs.String("topic", "", "topic (required)")
	queue := fs.Int("queue", -1, "queue id (required)")
	offset := fs.Int64("offset", -1, "first queue offset (default: the first stored)")
	maxN := fs.Int64("max", 0, "stop after this many messages (0: all)")
	tag := fs.String("tag", "", `tag filter, RocketMQ syntax ("A || B", "*")`)
	body := fs.Bool("body", false, "include the body (base64) in each line")
	group := fs.String("group", "mqstore-cli", "consumer group name")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore consume --dir DIR --topic T --queue Q [--offset O] [--max N] [--tag TAG] [--body]")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir", "topic"); err != nil {
		return err
	}
	switch {
	case *queue < 0:
		return cli.BadFlag(fs, "--queue is required and must not be negative")
	case *maxN < 0:
		return cli.BadFlag(fs, "--max must not be negative, got %d", *maxN)
	}
	var filter engine.MessageFilter
	if *tag != "" {
		filter = engine.ParseTagExpression(*tag)
	}
	store, err := openExisting(ctx, *dir)
	if err != nil {
		return err
	}
	defer store.Close()
	enc := json.NewEncoder(stdout)
	next, explicit := *offset, *offset >= 0
	if !explicit {
		next = 0
	}
	var printed int64
	var last *engine.GetResult
	for *maxN == 0 || printed < *maxN {
		batch := 32
		if *maxN > 0 {
			batch = int(min(int64(batch), *maxN-printed))
		}
		res, err := store.Get(ctx, *group, *topic, int32(*queue), next, batch, filter)
		if err != nil {
			return err
		}
		last = res
		if res.Status == engine.OffsetTooSmall && !explicit {
			next = res.NextBeginOffset
			explicit = true
			continue
		}
		for i := range res.Messages {
			r, err := res.Message(i)
			if err != nil {
				res.Release()
				return fmt.Errorf("message at queue offset %d: %w", res.Messages[i].QueueOffset, err)
			}
			if err := enc.Encode(lineOf(&r, *body)); err != nil {
				res.Release()
				return err
			}
			printed++
		}
		res.Release()
		progressed := res.NextBeginOffset > next
		next = res.NextBeginOffset
		if !(res.Status == engine.Found || (res.Status == engine.NoMatchedMessage && progressed && next < res.MaxOffset)) {
			break
		}
	}
	summary := map[string]any{"messages": printed, "nextOffset": next}
	if last != nil {
		summary["status"], summary["minOffset"], summary["maxOffset"] = last.Status.String(), last.MinOffset, last.MaxOffset
	}
	b, _ := json.Marshal(summary)
	fmt.Fprintln(stderr, string(b))
	return nil
}

func runQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory (required)")
	topic := fs.String("topic", "", "topic (required)")
	key := fs.String("key", "", "a key from the KEYS property")
	uniq := fs.String("uniq-key", "", "a UNIQ_KEY")
	begin := fs.Int64("begin", 0, "earliest store time, ms since the epoch")
	end := fs.Int64("end", 0, "latest store time, ms since the epoch (0: now)")
	maxN := fs.Int("max", engine.DefaultQueryMax, "most messages to return")
	body := fs.Bool("body", false, "include the body (base64) in each line")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore query --dir DIR --topic T (--key K | --uniq-key U) [--begin MS] [--end MS] [--max N]")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir", "topic"); err != nil {
		return err
	}
	switch {
	case (*key == "") == (*uniq == ""):
		return cli.BadFlag(fs, "give exactly one of --key and --uniq-key")
	case *maxN <= 0:
		return cli.BadFlag(fs, "--max must be positive, got %d", *maxN)
	case *end != 0 && *end < *begin:
		return cli.BadFlag(fs, "--end %d is before --begin %d", *end, *begin)
	}
	store, err := openExisting(ctx, *dir)
	if err != nil {
		return err
	}
	defer store.Close()
	enc := json.NewEncoder(stdout)
	if *uniq != "" {
		r, err := store.QueryByUniqKey(ctx, *topic, *uniq)
		if err != nil {
			return err
		}
		return enc.Encode(lineOf(&r, *body))
	}
	rs, err := store.QueryMessages(ctx, *topic, *key, *begin, *end, *maxN)
	if err != nil {
		return err
	}
	for i := range rs {
		if err := enc.Encode(lineOf(&rs[i], *body)); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "%d messages\n", len(rs))
	return nil
}
