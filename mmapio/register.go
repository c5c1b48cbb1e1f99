package mmapio

import "github.com/mqstore/mqstore/mappedfile"

// Name is the backend's name.
const Name = "mmap"

// Registration registers the backend under Name; its options are Options.
var Registration = mappedfile.Registration{
	Name:        Name,
	Description: "records encoded straight into a shared mapping of the segment; commit is a no-op, flush is msync(MS_SYNC) of the dirty pages (RocketMQ's default)",
	Requires:    "Linux",
	Default:     true,
	Rank:        0,
	Knobs: []mappedfile.Knob{
		{Name: "touchByWriting", Doc: "warm a new segment by writing zeros through the mapping instead of reading it (allocates its blocks)"},
	},
	NewOptions: func() any { return &Options{} },
	New: func(cfg mappedfile.Config, options any) (mappedfile.Backend, error) {
		opts, err := mappedfile.OptionsAs[Options](Name, options)
		if err != nil {
			return nil, err
		}
		if opts.Logger == nil {
			opts.Logger = cfg.Logger
		}
		return New(opts), nil
	},
	Durability: durability,
}

func init() { mappedfile.Register(Registration) }

// durability: an append is a copy into the shared mapping, which is the
// page cache, so a process crash loses nothing; Flush is msync(MS_SYNC) of
// the dirty range (file.go), which a power loss before it undoes.
func durability(cfg mappedfile.Config, options any) (mappedfile.Durability, error) {
	if _, err := mappedfile.OptionsAs[Options](Name, options); err != nil {
		return mappedfile.Durability{}, err
	}
	const mechanism = "msync(MS_SYNC) of the mapping's dirty range"
	if cfg.SyncFlush {
		return mappedfile.SyncFlushDurability(mechanism), nil
	}
	return mappedfile.Durability{
		Ack:          "after the record is copied into the segment's shared file mapping (the page cache); flushed in the background",
		ProcessCrash: "nothing: the mapping's pages belong to the file, and the kernel writes them back",
		PowerLoss: "what no msync has covered yet: up to the flush interval plus the flush in progress, the whole backlog when flushes fall behind" +
			mappedfile.AsyncFlushTail + " (the kernel's own writeback may have saved some, without a guarantee)",
		Mechanism: mechanism + " by the flush service",
	}, nil
}
