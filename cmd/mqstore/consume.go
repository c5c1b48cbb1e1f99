package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"

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
	case *queue > math.MaxInt32:
		return cli.BadFlag(fs, "--queue must be at most %d (queue ids are int32), got %d", math.MaxInt32, *queue)
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
	c := consumer{store: store, group: *group, topic: *topic, queue: int32(*queue), max: *maxN, filter: filter,
		body: *body, enc: json.NewEncoder(stdout)}
	if err := c.run(ctx, *offset); err != nil {
		return err
	}
	fmt.Fprintln(stderr, string(c.summary()))
	return nil
}

// consumer prints one queue's messages, one JSON line each.
type consumer struct {
	store  *engine.Store
	group  string
	topic  string
	queue  int32
	max    int64 // 0: all
	filter engine.MessageFilter
	body   bool
	enc    *json.Encoder

	printed int64
	next    int64             // the queue offset to read next
	last    *engine.GetResult // the last Get's answer, for the summary
}

// run prints from queue offset from (negative: the first stored) until the
// queue's end or max messages.
func (c *consumer) run(ctx context.Context, from int64) error {
	explicit := from >= 0
	c.next = max(from, 0)
	for c.max == 0 || c.printed < c.max {
		batch := 32
		if c.max > 0 {
			batch = int(min(int64(batch), c.max-c.printed))
		}
		res, err := c.store.Get(ctx, c.group, c.topic, c.queue, c.next, batch, c.filter)
		if err != nil {
			return err
		}
		c.last = res
		if res.Status == engine.OffsetTooSmall && !explicit {
			res.Release()
			c.next = res.NextBeginOffset // the first stored: start there
			explicit = true
			continue
		}
		if err := c.print(res); err != nil {
			return err
		}
		progressed := res.NextBeginOffset > c.next
		c.next = res.NextBeginOffset
		if !(res.Status == engine.Found || (res.Status == engine.NoMatchedMessage && progressed && c.next < res.MaxOffset)) {
			return nil
		}
	}
	return nil
}

// print writes a Get's messages and releases it.
func (c *consumer) print(res *engine.GetResult) error {
	defer res.Release()
	for i := range res.Messages {
		r, err := res.Message(i)
		if err != nil {
			return fmt.Errorf("message at queue offset %d: %w", res.Messages[i].QueueOffset, err)
		}
		if err := c.enc.Encode(lineOf(&r, c.body)); err != nil {
			return err
		}
		c.printed++
	}
	return nil
}

// summary is the closing JSON line: how many, where to go on, and the
// queue's state as the last Get saw it.
func (c *consumer) summary() []byte {
	summary := map[string]any{"messages": c.printed, "nextOffset": c.next}
	if c.last != nil {
		summary["status"], summary["minOffset"], summary["maxOffset"] = c.last.Status.String(), c.last.MinOffset, c.last.MaxOffset
	}
	b, _ := json.Marshal(summary)
	return b
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
