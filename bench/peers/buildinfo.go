package peers

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
)

// Module paths whose versions label the peers.
const (
	pebbleModule     = "github.com/cockroachdb/pebble/v2"
	natsServerModule = "github.com/nats-io/nats-server/v2"
	natsClientModule = "github.com/nats-io/nats.go"
)

// ErrNoBuildInfo: the binary carries no module version for a peer's
// dependency (built outside module mode), so its label cannot say what runs.
var ErrNoBuildInfo = errors.New("no module build info")

// unknownVersion stands for a version the build info does not give (test
// binaries carry no dependency list).
const unknownVersion = "(version unknown)"

// moduleVersion returns the version of module path linked into this binary,
// from its build info (the replacement's version when it is replaced), or
// unknownVersion and an error wrapping ErrNoBuildInfo.
func moduleVersion(path string) (string, error) {
	v, err := buildInfoVersion(path)
	if err != nil {
		return unknownVersion, err
	}
	return v, nil
}

func buildInfoVersion(path string) (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("%w: the binary was not built in module mode", ErrNoBuildInfo)
	}
	for _, dep := range bi.Deps {
		if dep.Path != path {
			continue
		}
		if dep.Replace != nil {
			if dep.Replace.Version == "" {
				return "", fmt.Errorf("%w: %s is replaced by the directory %s, which has no version",
					ErrNoBuildInfo, path, dep.Replace.Path)
			}
			return dep.Replace.Version, nil
		}
		if dep.Version == "" || dep.Version == "(devel)" {
			return "", fmt.Errorf("%w: %s has no version (%q)", ErrNoBuildInfo, path, dep.Version)
		}
		return dep.Version, nil
	}
	return "", fmt.Errorf("%w: %s is not linked into this binary", ErrNoBuildInfo, path)
}

// positions are a peer's written and durable byte counts. durable is
// only ever raised to a value written has already reached, and Positions
// reads durable first, so the pair it returns has durable <= written.
type positions struct {
	written atomic.Int64
	durable atomic.Int64
}

// Positions implements Durability.
func (p *positions) Positions() (writtenBytes, durableBytes int64) {
	durableBytes = p.durable.Load()
	writtenBytes = p.written.Load()
	return writtenBytes, durableBytes
}

// raise sets v to at least n.
func raise(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// stickyError keeps a peer's first failure: after a failed write or sync
// the state of the data is unknown, so every later op fails too (never a
// retried fsync).
type stickyError struct{ err atomic.Pointer[error] }

func (s *stickyError) set(err error) error {
	s.err.CompareAndSwap(nil, &err)
	return *s.err.Load()
}

func (s *stickyError) get() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}
