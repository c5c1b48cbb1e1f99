package mmapio

import "github.com/mqstore/mqstore/mappedfile"

// Name is the backend's name.
const Name = "mmap"

// Registration registers the backend under Name; its options are Options.
var Registration = mappedfile.Registration{
	Name:        Name,
	Description: "records encoded straight into a shared mapping of the segment; commit is a no-op, flush is msync(MS_SYNC) of the dirty pages (RocketMQ's default)",
	Requires:    "Linux",
	NewOptions:  func() any { return &Options{} },
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
}
