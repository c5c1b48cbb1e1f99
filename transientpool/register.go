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
	NewOptions:  func() any { return &Options{} },
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
