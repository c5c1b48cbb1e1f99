package uring

import (
	"github.com/mqstore/mqstore/mappedfile"
)

// RegistrationBuffered and RegistrationDirect register the two backends;
// their options are Options (Direct follows the name). The store's settings
// fill what the options leave unset: the segment size (staging buffers are
// mapped and registered at once, so their limits show at Open of the store)
// and sync flush, which makes every commit durable by itself
// (Options.SyncAtCommit).
var (
	RegistrationBuffered = registration(NameBuffered)
	RegistrationDirect   = registration(NameDirect)
)

func registration(name string) mappedfile.Registration {
	direct := name == NameDirect
	reg := mappedfile.Registration{
		Name: name,
		Description: "appends into an off-heap staging ring, readable at once; commit is pwrite (ext4 sends buffered io_uring writes to a worker thread), " +
			"flush fdatasync; with sync flush each commit is pwrite+fdatasync",
		Requires:   "Linux 5.6+ with io_uring allowed (not disabled by kernel.io_uring_disabled or seccomp)",
		NewOptions: func() any { return &Options{Direct: direct} },
		New: func(cfg mappedfile.Config, options any) (mappedfile.Backend, error) {
			opts, err := mappedfile.OptionsAs[Options](name, options)
			if err != nil {
				return nil, err
			}
			opts.Direct = direct
			if opts.SegmentSizeBytes == 0 {
				opts.SegmentSizeBytes = cfg.SegmentSizeBytes
			}
			if cfg.SyncFlush {
				opts.SyncAtCommit = true
			}
			if opts.Logger == nil {
				opts.Logger = cfg.Logger
			}
			return NewBackend(opts)
		},
	}
	if direct {
		reg.Description = "O_DIRECT: appends into an off-heap staging ring, readable at once; commit is one vectored io_uring write of whole blocks " +
			"(the partial last block padded with zeros, rewritten by the next commit); flush is an io_uring FSYNC(DATASYNC); " +
			"with sync flush each commit is one pwritev2(RWF_DSYNC) of those blocks (one write and one device flush on a pre-written segment)"
		reg.Requires += ", and a file system with O_DIRECT (not tmpfs)"
	}
	return reg
}
