package transientpool

import (
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
)

// Registration registers the backend under Name; its options are Options,
// whose SegmentSizeBytes the engine's segment size fills when it is 0 (and
// must equal when set).
var Registration = mappedfile.Registration{
	Name:        Name,
	Description: "appends into an mlocked off-heap buffer from a fixed pool; commit pwrites the buffer into the file, flush is fdatasync (RocketMQ's TransientStorePool)",
	Requires:    "Linux",
	Rank:        10,
	Buffered:    true,
	Unflushed:   unflushed,
	Knobs: []mappedfile.Knob{
		{Name: "poolSize", Doc: "buffers in the pool, each one segment: how many segments may hold uncommitted appends"},
		{Name: "whenEmpty", Doc: "what an Open does when every buffer is taken: fall back to the file mapping (fallback-mmap) or wait"},
		{Name: "noLock", Doc: "do not mlock the buffers (no RLIMIT_MEMLOCK needed; they may then be swapped out)"},
	},
	NewOptions: func() any { return &Options{} },
	New: func(cfg mappedfile.Config, options any) (mappedfile.Backend, error) {
		opts, err := mappedfile.OptionsAs[Options](Name, options)
		if err != nil {
			return nil, err
		}
		if opts.SegmentSizeBytes == 0 {
			opts.SegmentSizeBytes = cfg.SegmentSizeBytes
		} else if opts.SegmentSizeBytes != cfg.SegmentSizeBytes {
			return nil, fmt.Errorf("transientpool: Options.SegmentSizeBytes %d differs from the store's segment size %d (leave it 0): %w",
				opts.SegmentSizeBytes, cfg.SegmentSizeBytes, mappedfile.ErrInvalidArgument)
		}
		return New(opts)
	},
	Durability: durability,
}

func init() { mappedfile.Register(Registration) }

// unflushed: the pool's buffers, one segment each, hold what the commit
// service has not yet written into the files.
func unflushed(cfg mappedfile.Config, options any) (int64, string, error) {
	opts, err := mappedfile.OptionsAs[Options](Name, options)
	if err != nil {
		return 0, "", err
	}
	n := opts.PoolSize
	if n == 0 {
		n = DefaultPoolSize
	}
	seg := opts.SegmentSizeBytes
	if seg == 0 {
		seg = cfg.SegmentSizeBytes
	}
	return int64(n) * seg, fmt.Sprintf("the transient pool, %d segments", n), nil
}

// durability: an append is a copy into an mlocked pool buffer that only
// the commit (pwrite, segment.go) puts into the file, and Flush is
// fdatasync; a segment opened when the pool was empty (FallbackMmap) is
// written through its mapping instead, as mmap.
func durability(cfg mappedfile.Config, options any) (mappedfile.Durability, error) {
	opts, err := mappedfile.OptionsAs[Options](Name, options)
	if err != nil {
		return mappedfile.Durability{}, err
	}
	mechanism := "pwrite of the committed bytes from the pool buffer into the file, then fdatasync"
	fallback := ""
	if opts.WhenEmpty == FallbackMmap {
		fallback = "; a segment opened while the pool was empty is written through its file mapping and synced with fdatasync"
		mechanism += fallback
	}
	if cfg.SyncFlush {
		return mappedfile.SyncFlushDurability(mechanism), nil
	}
	return mappedfile.Durability{
		Ack:          "after the record is copied into an mlocked off-heap buffer of the pool (RocketMQ's TransientStorePool)" + fallback + "; committed and flushed in the background",
		ProcessCrash: "what the commit service has not yet written to the file (pwrite): up to the commit interval, more while commits fall behind",
		PowerLoss:    "everything not yet fdatasynced: up to the commit interval plus the flush interval, the whole backlog when they fall behind" + mappedfile.AsyncFlushTail,
		Mechanism:    mechanism + ", by the commit and flush services",
	}, nil
}

// MarshalText implements encoding.TextMarshaler ("fallback-mmap", "wait").
func (w WhenEmpty) MarshalText() ([]byte, error) {
	if w != FallbackMmap && w != Wait {
		return nil, fmt.Errorf("transientpool: %v: %w", w, mappedfile.ErrInvalidArgument)
	}
	return []byte(w.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (w *WhenEmpty) UnmarshalText(text []byte) error {
	switch string(text) {
	case FallbackMmap.String():
		*w = FallbackMmap
	case Wait.String():
		*w = Wait
	default:
		return fmt.Errorf("transientpool: WhenEmpty %q: want %q or %q: %w", text, FallbackMmap, Wait, mappedfile.ErrInvalidArgument)
	}
	return nil
}
