package namesrv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/mqstore/mqstore/remoting"
)

// DefaultRegisterInterval is how often a broker registers again.
const DefaultRegisterInterval = 10 * time.Second

// Registration is what a broker tells the name servers about itself.
type Registration struct {
	Cluster    string
	BrokerName string
	BrokerID   int64  // 0: master
	BrokerAddr string // the remoting address clients dial
	HAAddr     string // a master's HA address ("" for none)
	// Topics returns the broker's topic table at the time of registering.
	Topics func() map[string]TopicConfig
}

// RegistrarOptions configure a Registrar.
type RegistrarOptions struct {
	Addrs    []string      // the name servers (host:port)
	Interval time.Duration // DefaultRegisterInterval
	Timeout  time.Duration // one registration's bound (3 s)
	Logger   *slog.Logger
	// TLS, when set, dials the name servers with TLS (name servers that
	// serve it: mqstore namesrv --tls-cert).
	TLS *tls.Config
}

// Registrar keeps a broker registered with every name server: at once, on
// Kick, and every Interval, each over a connection it keeps open (the name
// server drops the broker when it closes).
type Registrar struct {
	reg  Registration
	opts RegistrarOptions
	kick chan struct{}

	// registering serializes registrations, from the topic table's
	// snapshot to the name server's answer: a name server replaces a
	// broker's topics with each registration's, so one that took its
	// snapshot earlier must never land later (the periodic registration
	// would drop a topic just created and registered at once).
	registering sync.Mutex

	mu         sync.Mutex
	conns      map[string]*remoting.Conn
	masterAddr string
	closed     bool
}

// NewRegistrar returns a registrar; Run registers.
func NewRegistrar(reg Registration, opts RegistrarOptions) *Registrar {
	if opts.Interval <= 0 {
		opts.Interval = DefaultRegisterInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Registrar{reg: reg, opts: opts, kick: make(chan struct{}, 1), conns: map[string]*remoting.Conn{}}
}

// MasterAddr is the master's remoting address the name servers last
// answered a slave's registration with ("" when none is known).
func (r *Registrar) MasterAddr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.masterAddr
}

// Kick asks Run to register again now (a topic was created).
func (r *Registrar) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run registers until ctx ends, then unregisters and closes its
// connections.
func (r *Registrar) Run(ctx context.Context) {
	t := time.NewTicker(r.opts.Interval)
	defer t.Stop()
	for {
		r.RegisterAll(ctx)
		select {
		case <-ctx.Done():
			r.unregisterAll()
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// RegisterAll registers with every name server once; it returns the
// failures joined (a name server that is down is retried next time).
func (r *Registrar) RegisterAll(ctx context.Context) error {
	var errs []error
	for _, addr := range r.opts.Addrs {
		if err := r.register(ctx, addr); err != nil {
			errs = append(errs, err)
			r.opts.Logger.Warn("broker: register with name server", slog.String("namesrv", addr), slog.Any("err", err))
		}
	}
	return errors.Join(errs...)
}

func (r *Registrar) conn(ctx context.Context, addr string) (*remoting.Conn, error) {
	r.mu.Lock()
	c := r.conns[addr]
	r.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
	}
	c, err := remoting.Dial(ctx, addr, nil, remoting.ConnOptions{Logger: r.opts.Logger, TLS: r.opts.TLS})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return nil, remoting.ErrClosed
	}
	if old := r.conns[addr]; old != nil {
		old.Close()
	}
	r.conns[addr] = c
	return c, nil
}

func (r *Registrar) register(ctx context.Context, addr string) error {
	r.registering.Lock() // a holder is bounded by its own timeout
	defer r.registering.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	c, err := r.conn(ctx, addr)
	if err != nil {
		return err
	}
	topics := map[string]TopicConfig{}
	if r.reg.Topics != nil {
		topics = r.reg.Topics()
	}
	req := remoting.NewRequest(remoting.RegisterBroker, map[string]string{
		"brokerName": r.reg.BrokerName, "brokerAddr": r.reg.BrokerAddr, "clusterName": r.reg.Cluster,
		"haServerAddr": r.reg.HAAddr, "brokerId": strconv.FormatInt(r.reg.BrokerID, 10), "compressed": "false",
	}, encode(RegisterBrokerBody{TopicConfigSerializeWrapper: TopicConfigWrapper{TopicConfigTable: topics}}))
	resp, err := c.Invoke(ctx, req)
	if err != nil {
		return err
	}
	if resp.Code != remoting.Success {
		return fmt.Errorf("name server %s refused the registration: code %d: %s", addr, resp.Code, resp.Remark)
	}
	r.mu.Lock()
	r.masterAddr = resp.Field("masterAddr")
	r.mu.Unlock()
	return nil
}

func (r *Registrar) unregisterAll() {
	r.mu.Lock()
	r.closed = true
	conns := r.conns
	r.conns = map[string]*remoting.Conn{}
	r.mu.Unlock()
	for _, c := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.Timeout)
		req := remoting.NewRequest(remoting.UnregisterBroker, map[string]string{
			"brokerName": r.reg.BrokerName, "brokerAddr": r.reg.BrokerAddr, "clusterName": r.reg.Cluster,
			"brokerId": strconv.FormatInt(r.reg.BrokerID, 10)}, nil)
		if _, err := c.Invoke(ctx, req); err != nil {
			r.opts.Logger.Debug("broker: unregister", slog.Any("err", err))
		}
		cancel()
		c.Close()
	}
}
