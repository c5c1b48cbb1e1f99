package mappedfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// ErrUnknownBackend: no backend of that name is registered.
var ErrUnknownBackend = errors.New("mappedfile: unknown backend")

// Config is what every backend constructor gets from its user (the engine):
// the settings that are not the backend's own.
type Config struct {
	// SegmentSizeBytes is the size of the segments the backend will open;
	// backends that size memory up front (a buffer pool) use it.
	SegmentSizeBytes int64
	// Logger receives what a backend cannot return (nil: slog.Default()).
	Logger *slog.Logger
	// SyncFlush: the store acknowledges a write only once it is durable
	// (sync flush), so each of its Commit calls is followed by a Flush; a
	// backend may then make every commit durable in the same I/O.
	SyncFlush bool
}

// Registration describes one backend to a Registry: its name, what a user
// reads when choosing it, and how to build it with its own options.
//
// A backend package exports one (or one per variant) and adds it to the
// process's registry from its init function (Register); package backends
// imports every backend of this module, so a command or a test that imports
// it can name any of them. Nothing else needs to know the backend: the
// fields below say what callers would otherwise infer from its name. Options stay the backend's
// own type (mmapio.Options, transientpool.Options, …): New receives nil (the
// defaults), a value of that type or a pointer to one, and rejects any other
// type with ErrInvalidArgument. The options type must marshal to JSON, so a
// benchmark run can record exactly what it ran (fields that cannot, such as
// a logger, carry `json:"-"`).
type Registration struct {
	// Name is what users type (Options.Backend, --backends).
	Name string
	// Description is one line: where appends go, what commit and flush do.
	Description string
	// Requires says what the backend needs to run ("Linux", "Linux 5.6+
	// with io_uring enabled", "nothing"); README's "what runs where".
	Requires string
	// Volatile: the backend keeps its files in memory only (nothing reaches
	// a disk). Benchmarks and real-disk crash trials leave it out.
	Volatile bool
	// Default: the backend a store uses when none is named, and for its
	// ConsumeQueue and IndexFile files (mmap, as in RocketMQ). At most one
	// registration of a registry is the default.
	Default bool
	// Rank orders the registrations in the lists users see (lower first;
	// equal ranks by name).
	Rank int
	// Buffered: an append stays in the backend's own memory until Commit
	// writes it into the file (a pwrite, an io_uring write), so the store's
	// commit service and its options (commit interval, commit least pages)
	// matter. False: the backend writes through, an append is in the file
	// (its page cache) at once and Commit is a no-op.
	Buffered bool
	// DirectIO: committed bytes bypass the page cache (O_DIRECT), so the
	// kernel's dirty-page threshold neither holds nor throttles them.
	DirectIO bool
	// Unflushed says how many bytes the backend itself may hold appended
	// and not yet in its files with these options (nil: the defaults) and
	// cfg, and what holds them (uring's staging rings, the transient pool),
	// not counting the page cache. Nil: none (a write-through backend).
	Unflushed func(cfg Config, options any) (bytes int64, what string, err error)
	// Tuned returns the options its authors would run with cfg (nil: the
	// defaults) and why; nil Tuned: the defaults.
	Tuned func(cfg Config) (options any, why string)
	// Knobs are the options worth tuning, by their JSON name, in the order
	// to try them.
	Knobs []Knob
	// NewOptions returns a pointer to a new value of the backend's options
	// type holding its defaults (what New uses for nil), or nil when the
	// backend takes no options. DecodeOptions unmarshals into it.
	NewOptions func() any
	// New builds the backend.
	New func(cfg Config, options any) (Backend, error)
	// Durability says what an acknowledged append means on this backend
	// with these options (nil: the defaults, as for New) under the store's
	// flush mode, cfg.SyncFlush: sync, a Put returns once a flush covering
	// its record returned; async, once the record is in the backend's
	// memory, made durable later by the store's flush service (and, for a
	// backend whose commit moves data, its commit service). The backend
	// names its own mechanism — the system calls its Commit and Flush make
	// with these options — and says "the flush interval" and "the commit
	// interval" for the store's policy, whose values its caller knows. It
	// lives beside the code it describes so that the two change together;
	// mqbench's durability table prints it. Required: NewRegistry refuses a
	// registration without it.
	Durability func(cfg Config, options any) (Durability, error)
}

// Knob is one tunable backend option: its JSON field name in the options
// type and what it changes.
type Knob struct {
	Name string `json:"name"`
	Doc  string `json:"doc"`
}

// Durability is what an acknowledged append means: when the
// acknowledgement is sent, what a crash of the process loses (the machine
// stays up: the page cache survives), what a power loss loses, and the
// mechanism that makes data durable.
type Durability struct {
	Ack          string `json:"ack"`
	ProcessCrash string `json:"processCrash"`
	PowerLoss    string `json:"powerLoss"`
	Mechanism    string `json:"mechanism"`
}

// AsyncFlushTail ends an async statement's power-loss window: the flush
// service flushes only when at least FlushLeastPages pages are pending
// (RocketMQ's flushPhysicQueueLeastPages), and everything only every
// FlushThoroughInterval, so a light load's last records wait for that.
const AsyncFlushTail = "; a tail of fewer than the flush least pages is flushed only by the thorough flush, up to the thorough flush interval after it was written"

// SyncFlushDurability is the statement of sync flush on any backend whose
// flush (or durable commit) is mechanism: the acknowledgement waits for a
// group commit that made the record durable, so neither a crash of the
// process nor a power loss loses an acknowledged record (the latter as far
// as the device honours cache flushes).
func SyncFlushDurability(mechanism string) Durability {
	return Durability{
		Ack:          "after the group commit that made the record durable returned (" + mechanism + ")",
		ProcessCrash: "nothing acknowledged",
		PowerLoss:    "nothing acknowledged, if the device honours cache flushes (or FUA writes)",
		Mechanism:    mechanism,
	}
}

// Registry is an ordered set of registrations, looked up by name.
type Registry struct {
	list []Registration
}

// NewRegistry checks and orders the registrations (names unique and
// non-empty, New and Durability set).
func NewRegistry(regs ...Registration) (*Registry, error) {
	r := &Registry{}
	for _, reg := range regs {
		switch {
		case reg.Name == "" || strings.ContainsAny(reg.Name, " ,\t\n"):
			return nil, fmt.Errorf("mappedfile: registration %q: a name must be non-empty, without spaces or commas: %w", reg.Name, ErrInvalidArgument)
		case reg.New == nil:
			return nil, fmt.Errorf("mappedfile: registration %q has no New: %w", reg.Name, ErrInvalidArgument)
		case reg.Durability == nil:
			return nil, fmt.Errorf("mappedfile: registration %q does not say what its acknowledgement means (Durability): %w", reg.Name, ErrInvalidArgument)
		case r.index(reg.Name) >= 0:
			return nil, fmt.Errorf("mappedfile: backend %q registered twice: %w", reg.Name, ErrInvalidArgument)
		case reg.Default && slices.ContainsFunc(r.list, func(o Registration) bool { return o.Default }):
			return nil, fmt.Errorf("mappedfile: backend %q is a second default: %w", reg.Name, ErrInvalidArgument)
		}
		r.list = append(r.list, reg)
	}
	slices.SortStableFunc(r.list, func(a, b Registration) int {
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return strings.Compare(a.Name, b.Name)
	})
	return r, nil
}

// The process's registry: what Register added, in rank order. Each
// Register replaces the snapshot, so a Registry returned by Registered
// never changes under its user.
var registered struct {
	mu   sync.Mutex
	list []Registration
	reg  *Registry
}

// Register adds reg to the process's registry. Backend packages call it
// from their init function; it panics on a malformed or duplicate
// registration (a programmer error, found at start-up).
func Register(reg Registration) {
	registered.mu.Lock()
	defer registered.mu.Unlock()
	r, err := NewRegistry(append(slices.Clone(registered.list), reg)...)
	if err != nil {
		panic(err)
	}
	registered.list = append(registered.list, reg)
	registered.reg = r
}

// Registered returns the process's registry: "mem" (registered by this
// package) and every backend whose package the program imports (package
// backends imports them all).
func Registered() *Registry {
	registered.mu.Lock()
	defer registered.mu.Unlock()
	return registered.reg
}

func init() { Register(MemRegistration) }

// MustRegistry is NewRegistry for package-level lists; it panics on a
// duplicate or malformed registration (a programmer error).
func MustRegistry(regs ...Registration) *Registry {
	r, err := NewRegistry(regs...)
	if err != nil {
		panic(err)
	}
	return r
}

func (r *Registry) index(name string) int {
	return slices.IndexFunc(r.list, func(reg Registration) bool { return reg.Name == name })
}

// All returns the registrations in order.
func (r *Registry) All() []Registration { return slices.Clone(r.list) }

// Names returns the registered names in order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.list))
	for i, reg := range r.list {
		names[i] = reg.Name
	}
	return names
}

// Default returns the default registration (see Registration.Default).
func (r *Registry) Default() (Registration, error) {
	for _, reg := range r.list {
		if reg.Default {
			return reg, nil
		}
	}
	return Registration{}, fmt.Errorf("no default backend among %s (a program names the backends it links by importing github.com/mqstore/mqstore/backends): %w",
		strings.Join(r.Names(), ", "), ErrUnknownBackend)
}

// Lookup returns the registration of name.
func (r *Registry) Lookup(name string) (Registration, error) {
	if i := r.index(name); i >= 0 {
		return r.list[i], nil
	}
	return Registration{}, fmt.Errorf("backend %q: want one of %s (a program links the backends it imports; github.com/mqstore/mqstore/backends imports them all): %w",
		name, strings.Join(r.Names(), ", "), ErrUnknownBackend)
}

// New builds the backend name with cfg and its options (nil: defaults).
func (r *Registry) New(name string, cfg Config, options any) (Backend, error) {
	reg, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	b, err := reg.New(cfg, options)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	return b, nil
}

// DecodeOptions unmarshals JSON (as recorded in a run.json) into the options
// type of backend name, starting from its defaults; unknown fields are an
// error. It returns a pointer to the options value, ready for New.
func (r *Registry) DecodeOptions(name string, data []byte) (any, error) {
	reg, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	if reg.NewOptions == nil {
		if len(bytes.TrimSpace(data)) == 0 || string(bytes.TrimSpace(data)) == "null" || string(bytes.TrimSpace(data)) == "{}" {
			return nil, nil
		}
		return nil, fmt.Errorf("backend %s takes no options, got %s: %w", name, data, ErrInvalidArgument)
	}
	opts := reg.NewOptions()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(opts); err != nil {
		return nil, fmt.Errorf("backend %s: options %s: %w (%w)", name, data, err, ErrInvalidArgument)
	}
	return opts, nil
}

// OptionsAs converts the options a constructor received into the backend's
// type T: nil gives T's zero value (the backend's defaults), a T or a *T
// gives that value; anything else is ErrInvalidArgument naming both types.
func OptionsAs[T any](backend string, options any) (T, error) {
	var zero T
	switch o := options.(type) {
	case nil:
		return zero, nil
	case T:
		return o, nil
	case *T:
		if o == nil {
			return zero, nil
		}
		return *o, nil
	}
	return zero, fmt.Errorf("backend %s: options of type %T, want %v: %w", backend, options, reflect.TypeFor[T](), ErrInvalidArgument)
}

// MemRegistration registers MemFS as the "mem" backend: files in memory,
// nothing on disk (tests, and benchmarks of the engine's own cost).
var MemRegistration = Registration{
	Name:        "mem",
	Description: "in memory, nothing on disk: a model of a page cache, a disk and directory entries that simulated kills and power losses cut as a real machine would (tests; the engine's own cost)",
	Requires:    "nothing",
	Volatile:    true,
	Rank:        100,
	NewOptions:  func() any { return &MemOptions{} },
	New: func(_ Config, options any) (Backend, error) {
		opts, err := OptionsAs[MemOptions]("mem", options)
		if err != nil {
			return nil, err
		}
		return NewMemFS(opts), nil
	},
	Durability: func(_ Config, options any) (Durability, error) {
		if _, err := OptionsAs[MemOptions]("mem", options); err != nil {
			return Durability{}, err
		}
		return Durability{
			Ack:          "after the record is copied into process memory (a sync flush copies it into the in-memory durable image first)",
			ProcessCrash: "everything: nothing is on disk",
			PowerLoss:    "everything",
			Mechanism:    "none: an in-memory file system whose flush copies into a durable image that simulated crashes keep (tests; the engine's own cost)",
		}, nil
	},
}
