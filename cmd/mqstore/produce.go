package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/ha"
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

// produceFlags are produce's flags.
type produceFlags struct {
	dir, topic, tags, backend, flush *string
	queues, size, waitSlaves         *int
	count, segmentSize               *int64
	recycle                          *int
	keys, printAcks, keepGoing       *bool
	rf                               *retentionFlags
	h                                *haFlags
}

func addProduceFlags(fs *flag.FlagSet) *produceFlags {
	f := &produceFlags{
		dir:         fs.String("dir", "", "store directory (required)"),
		topic:       fs.String("topic", "", "topic (required)"),
		queues:      fs.Int("queues", 1, "queue ids 0..N-1, used round robin"),
		count:       fs.Int64("count", 1000, "messages to append"),
		size:        fs.Int("size", 1024, "body size in bytes"),
		tags:        fs.String("tags", "", "TAGS property of every message"),
		keys:        fs.Bool("keys", false, "set KEYS = k<index>"),
		backend:     fs.String("backend", engine.DefaultOptions().Backend, "I/O backend: "+backendList()),
		flush:       fs.String("flush", "async", "flush mode: async or sync"),
		segmentSize: fs.Int64("segment-size", 0, "CommitLog segment size in bytes for a new store (default 1 GiB; must match an existing store)"),
		recycle: fs.Int("recycle-segments", 0, "keep up to N CommitLog segments retention deletes and reuse them as new segments "+
			"(engine.Options.RecycleSegments; once used, records carry a whole-record checksum)"),
		printAcks: fs.Bool("print-acks", false, "print one JSON line per acknowledged message (after the chosen flush and replication); "+
			"a message stored but not acknowledged gets a line with its \"status\""),
		waitSlaves: fs.Int("wait-slaves", 0, "with --ha-listen: wait until this many slaves are connected before producing"),
		keepGoing: fs.Bool("keep-going", false, "go on after a message stored without acknowledgement (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, "+
			"IN_SYNC_REPLICAS_NOT_ENOUGH)"),
		rf: addRetentionFlags(fs),
		h:  addHAFlags(fs, "async-master", false),
	}
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore produce --dir DIR --topic T [--queues N] [--count N] [--size BYTES] [--tags TAG] [--keys]\n"+
			"       [--backend NAME] [--flush async|sync] [--segment-size BYTES] [--recycle-segments N] [--file-reserved-time D --delete-when HOURS]\n"+
			"       [--print-acks] [--keep-going]\n"+
			"       [--role async-master|sync-master --ha-listen ADDR [--wait-slaves N]]\n\n"+
			"With --ha-listen the store is a replication master in this process: slaves (mqstore slave) connect\n"+
			"there; with --role sync-master a message is acknowledged only once a slave has it.")
		fs.PrintDefaults()
	}
	return f
}

// options checks the parsed flags and returns the store's options and,
// with --ha-listen, the HA master's.
func (f *produceFlags) options(fs *flag.FlagSet, stderr io.Writer) (engine.Options, ha.MasterOptions, error) {
	var mo ha.MasterOptions
	switch {
	case *f.queues < 1 || *f.queues > math.MaxInt32:
		return engine.Options{}, mo, cli.BadFlag(fs, "--queues must be from 1 to %d (queue ids are int32), got %d", math.MaxInt32, *f.queues)
	case *f.count < 0:
		return engine.Options{}, mo, cli.BadFlag(fs, "--count must not be negative, got %d", *f.count)
	case *f.size < 0:
		return engine.Options{}, mo, cli.BadFlag(fs, "--size must not be negative, got %d", *f.size)
	case *f.recycle < 0:
		return engine.Options{}, mo, cli.BadFlag(fs, "--recycle-segments must not be negative, got %d", *f.recycle)
	case *f.waitSlaves < 0:
		return engine.Options{}, mo, cli.BadFlag(fs, "--wait-slaves must not be negative, got %d", *f.waitSlaves)
	case *f.waitSlaves > 0 && *f.h.listen == "":
		return engine.Options{}, mo, cli.BadFlag(fs, "--wait-slaves needs --ha-listen")
	}
	mode, err := engine.ParseFlushMode(*f.flush)
	if err != nil {
		return engine.Options{}, mo, cli.BadFlag(fs, "--flush: %v", err)
	}
	role, err := f.h.parseRole(fs)
	if err != nil {
		return engine.Options{}, mo, err
	}
	switch {
	case role == engine.Slave:
		return engine.Options{}, mo, cli.BadFlag(fs, "--role slave: a slave takes no messages; produce to its master")
	case role == engine.SyncMaster && *f.h.listen == "":
		return engine.Options{}, mo, cli.BadFlag(fs, "--role sync-master needs --ha-listen, where its slaves connect")
	}
	o := engine.Options{Backend: *f.backend, FlushMode: mode, SegmentSizeBytes: *f.segmentSize, RecycleSegments: *f.recycle}
	if err := f.rf.apply(fs, &o); err != nil {
		return engine.Options{}, mo, err
	}
	if *f.h.listen != "" {
		log := textLogger(stderr)
		o.Logger = log
		if mo, err = f.h.masterOptions(fs, log); err != nil {
			return engine.Options{}, mo, err
		}
	}
	return f.h.storeOptions(o, role), mo, nil
}

// startMaster starts the HA master of --ha-listen (nil without it) and
// waits for --wait-slaves slaves. On an error the store is closed.
func (f *produceFlags) startMaster(ctx context.Context, store *engine.Store, mo ha.MasterOptions, stderr io.Writer) (*ha.Master, error) {
	if *f.h.listen == "" {
		return nil, nil
	}
	master, err := ha.NewMaster(store, mo)
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	fmt.Fprintf(stderr, "ha master listening on %s\n", master.Addr())
	if *f.waitSlaves > 0 {
		fmt.Fprintf(stderr, "waiting for %d slaves\n", *f.waitSlaves)
		if err := master.WaitSlaves(ctx, *f.waitSlaves); err != nil {
			return nil, errors.Join(err, master.Close(), store.Close())
		}
	}
	return master, nil
}

func runProduce(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	f := addProduceFlags(fs)
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir", "topic"); err != nil {
		return err
	}
	o, mo, err := f.options(fs, stderr)
	if err != nil {
		return err
	}
	store, err := openServed(ctx, *f.dir, o)
	if err != nil {
		return err
	}
	master, err := f.startMaster(ctx, store, mo, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	p := producer{store: store, topic: *f.topic, queues: int32(*f.queues), size: *f.size, tags: *f.tags, keys: *f.keys,
		printAcks: *f.printAcks, keepGoing: *f.keepGoing, stdout: stdout, stderr: stderr}
	n, bytes, err := p.run(ctx, *f.count)
	elapsed := time.Since(start)
	if master != nil {
		err = errors.Join(err, master.Close())
	}
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	fmt.Fprintf(stderr, "produced %d messages, %.1f MB in %.2fs: %.0f msgs/s, %.1f MB/s\n",
		n, float64(bytes)/1e6, elapsed.Seconds(), float64(n)/elapsed.Seconds(), float64(bytes)/1e6/elapsed.Seconds())
	if len(p.notAcked) > 0 {
		fmt.Fprintf(stderr, "stored but not acknowledged: %v\n", p.notAcked)
	}
	return err
}

// producer appends generated messages.
type producer struct {
	store          *engine.Store
	topic          string
	queues         int32
	size           int
	tags           string
	keys           bool
	printAcks      bool
	keepGoing      bool
	stdout, stderr io.Writer
	notAcked       map[string]int // by status
}

// storedStatus reports whether a Put with this status stored the message
// (it has offsets) without acknowledging it.
func storedStatus(s engine.PutStatus) bool {
	switch s {
	case engine.FlushDiskTimeout, engine.FlushSlaveTimeout, engine.SlaveNotAvailable, engine.InSyncReplicasNotEnough:
		return true
	}
	return false
}

func (p *producer) run(ctx context.Context, count int64) (int64, int64, error) {
	runID := fmt.Sprintf("%08X%012X", os.Getpid(), time.Now().UnixMilli())
	enc := json.NewEncoder(p.stdout)
	var bytes int64
	for i := int64(0); i < count; i++ {
		if err := ctx.Err(); err != nil {
			return i, bytes, err
		}
		uniq := fmt.Sprintf("%s%012X", runID, i)
		props := make([]engine.Property, 0, 3)
		if p.tags != "" {
			props = append(props, engine.Property{Name: "TAGS", Value: p.tags})
		}
		if p.keys {
			props = append(props, engine.Property{Name: "KEYS", Value: fmt.Sprintf("k%d", i)})
		}
		props = append(props, engine.Property{Name: "UNIQ_KEY", Value: uniq})
		m := &engine.Message{Topic: p.topic, QueueID: int32(i % int64(p.queues)), Body: Body(i, p.size), Properties: props}
		res, err := p.store.Put(ctx, m)
		if err != nil && !storedStatus(res.Status) {
			return i, bytes, fmt.Errorf("message %d: %w", i, err)
		}
		bytes += int64(res.Size)
		a := ack{I: i, Topic: p.topic, QueueID: m.QueueID, QueueOffset: res.QueueOffset, PhysicalOffset: res.PhysicalOffset, Size: res.Size, UniqKey: uniq}
		if err != nil {
			a.Status = res.Status.String()
		}
		if p.printAcks {
			if err := enc.Encode(a); err != nil { // one write per line: the ack is out before the next Put
				return i + 1, bytes, fmt.Errorf("print ack: %w", err)
			}
		}
		if err != nil {
			if p.notAcked == nil {
				p.notAcked = map[string]int{}
			}
			p.notAcked[a.Status]++
			err = fmt.Errorf("message %d stored at offset %d (queue %d offset %d) but not acknowledged: %w", i, res.PhysicalOffset, m.QueueID, res.QueueOffset, err)
			if !p.keepGoing {
				return i + 1, bytes, err
			}
			fmt.Fprintln(p.stderr, err)
		}
	}
	return count, bytes, nil
}
