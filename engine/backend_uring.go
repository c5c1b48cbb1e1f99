package engine

import (
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/uring"
)

// uringRegistration registers "uring" or "uring-direct" with uring.Options
// (Direct follows the name). When io_uring cannot run here New fails with an
// error that says why and names the other backends.
//
// It belongs in package uring (as mmapio.Registration is in mmapio); it sits
// here until uring exports its own registrations.
func uringRegistration(name string) mappedfile.Registration {
	direct := name == uring.NameDirect
	reg := mappedfile.Registration{
		Name:        name,
		Description: "appends into a registered off-heap buffer; commit submits io_uring WRITE_FIXED requests, flush is an io_uring FSYNC(DATASYNC)",
		Requires:    "Linux 5.6+ with io_uring allowed (not disabled by kernel.io_uring_disabled or seccomp)",
		NewOptions:  func() any { return &uring.Options{Direct: direct} },
		New: func(_ mappedfile.Config, options any) (mappedfile.Backend, error) {
			opts, err := mappedfile.OptionsAs[uring.Options](name, options)
			if err != nil {
				return nil, err
			}
			opts.Direct = direct
			return uring.NewBackend(opts)
		},
	}
	if direct {
		reg.Description = "O_DIRECT block-aligned io_uring writes from an aligned registered buffer (the partial tail block rewritten); flush is FSYNC(DATASYNC), or none with PreZero's RWF_DSYNC writes"
		reg.Requires += ", and a file system with O_DIRECT (not tmpfs)"
	}
	return reg
}
