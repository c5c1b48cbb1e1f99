package namesrv

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mqstore/mqstore/remoting"
)

// Defaults of Options.
const (
	DefaultListenAddr = "127.0.0.1:9876"
	// DefaultBrokerExpiry: a broker that has not registered for this long
	// leaves the routes (brokers register every DefaultRegisterInterval).
	DefaultBrokerExpiry = 30 * time.Second
	DefaultScanInterval = 5 * time.Second
)

// Options configure a name server; zero fields take the defaults.
type Options struct {
	ListenAddr   string        // 127.0.0.1:9876
	BrokerExpiry time.Duration // 30 s
	ScanInterval time.Duration // 5 s: how often expired brokers are looked for
	Server       remoting.ServerOptions
	Logger       *slog.Logger
	now          func() time.Time
}

// Server is a running name server.
type Server struct {
	opts Options
	log  *slog.Logger
	srv  *remoting.Server
	stop chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// groups by broker name; live brokers by address.
	groups map[string]*group
	live   map[string]*liveBroker
	// topics: topic → broker name → its queues (from masters' registrations).
	topics map[string]map[string]QueueData
}

type group struct {
	cluster string
	addrs   map[int64]string
}

type liveBroker struct {
	name     string
	id       int64
	haAddr   string
	conn     *remoting.Conn
	lastSeen time.Time
}

// Start listens and serves until Close.
func Start(opts Options) (*Server, error) {
	if opts.ListenAddr == "" {
		opts.ListenAddr = DefaultListenAddr
	}
	if opts.BrokerExpiry <= 0 {
		opts.BrokerExpiry = DefaultBrokerExpiry
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = DefaultScanInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	s := &Server{opts: opts, log: opts.Logger, stop: make(chan struct{}), groups: map[string]*group{},
		live: map[string]*liveBroker{}, topics: map[string]map[string]QueueData{}}
	so := opts.Server
	so.Conn.Logger = opts.Logger
	so.OnClose = s.connClosed
	srv, err := remoting.Listen(opts.ListenAddr, s, so)
	if err != nil {
		return nil, fmt.Errorf("name server: %w", err)
	}
	s.srv = srv
	s.wg.Add(1)
	go s.scanLoop()
	return s, nil
}

// Addr is the address the name server listens on.
func (s *Server) Addr() string { return s.srv.Addr().String() }

// Close stops the name server.
func (s *Server) Close() error {
	close(s.stop)
	err := s.srv.Close()
	s.wg.Wait()
	return err
}

func (s *Server) scanLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.expire()
		}
	}
}

func (s *Server) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.now()
	for addr, b := range s.live {
		if now.Sub(b.lastSeen) > s.opts.BrokerExpiry {
			s.log.Warn("name server: broker expired", slog.String("broker", b.name), slog.Int64("id", b.id),
				slog.String("addr", addr), slog.Duration("silentFor", now.Sub(b.lastSeen)))
			s.removeLocked(addr)
		}
	}
}

// connClosed drops the brokers that registered on a connection that closed
// (and have not registered again on another since).
func (s *Server) connClosed(c *remoting.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, b := range s.live {
		if b.conn == c {
			s.log.Info("name server: broker connection closed", slog.String("broker", b.name), slog.Int64("id", b.id),
				slog.String("addr", addr))
			s.removeLocked(addr)
		}
	}
}

// removeLocked drops a broker; its group's queues go with the group's last
// broker.
func (s *Server) removeLocked(addr string) {
	b, ok := s.live[addr]
	if !ok {
		return
	}
	delete(s.live, addr)
	g := s.groups[b.name]
	if g == nil {
		return
	}
	if g.addrs[b.id] == addr {
		delete(g.addrs, b.id)
	}
	if len(g.addrs) > 0 {
		return
	}
	delete(s.groups, b.name)
	for topic, qs := range s.topics {
		delete(qs, b.name)
		if len(qs) == 0 {
			delete(s.topics, topic)
		}
	}
}

// ServeRemoting implements remoting.Handler.
func (s *Server) ServeRemoting(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	switch req.Code {
	case remoting.RegisterBroker:
		return s.register(c, req)
	case remoting.UnregisterBroker:
		s.mu.Lock()
		if b, ok := s.live[req.Field("brokerAddr")]; ok && b.name == req.Field("brokerName") {
			s.removeLocked(req.Field("brokerAddr"))
		}
		s.mu.Unlock()
		return remoting.NewResponse(req, remoting.Success, "")
	case remoting.GetRouteInfoByTopic:
		return s.route(req)
	case remoting.GetBrokerClusterInfo:
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.Body = encode(s.clusterInfo())
		return resp
	case remoting.GetAllTopicListFromNameSrv:
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.Body = encode(TopicList{TopicList: s.Topics()})
		return resp
	}
	return remoting.NewResponse(req, remoting.RequestCodeNotSupported, fmt.Sprintf("the name server does not serve request code %d", req.Code))
}

func (s *Server) register(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	name, addr, cluster := req.Field("brokerName"), req.Field("brokerAddr"), req.Field("clusterName")
	id, err := req.Int("brokerId", -1)
	switch {
	case err != nil:
		return remoting.NewResponse(req, remoting.SystemError, "register broker: "+err.Error())
	case name == "" || addr == "" || id < 0:
		return remoting.NewResponse(req, remoting.SystemError, "register broker: brokerName, brokerAddr and brokerId (≥ 0) are required")
	}
	var body RegisterBrokerBody
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return remoting.NewResponse(req, remoting.SystemError, "register broker: body is not a topic config table: "+err.Error())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[name]
	if g == nil {
		g = &group{addrs: map[int64]string{}}
		s.groups[name] = g
		s.log.Info("name server: broker group registered", slog.String("broker", name), slog.String("cluster", cluster))
	}
	g.cluster = cluster
	if old, ok := g.addrs[id]; ok && old != addr {
		s.log.Info("name server: broker address changed", slog.String("broker", name), slog.Int64("id", id),
			slog.String("from", old), slog.String("to", addr))
		delete(s.live, old)
	}
	if _, ok := s.live[addr]; !ok {
		s.log.Info("name server: broker registered", slog.String("broker", name), slog.Int64("id", id), slog.String("addr", addr))
	}
	g.addrs[id] = addr
	s.live[addr] = &liveBroker{name: name, id: id, haAddr: req.Field("haServerAddr"), conn: c, lastSeen: s.opts.now()}
	if id == MasterID {
		table := body.TopicConfigSerializeWrapper.TopicConfigTable
		for topic, qs := range s.topics {
			if _, ok := table[topic]; !ok {
				delete(qs, name)
				if len(qs) == 0 {
					delete(s.topics, topic)
				}
			}
		}
		for topic, tc := range table {
			if topic == "" {
				continue
			}
			qs := s.topics[topic]
			if qs == nil {
				qs = map[string]QueueData{}
				s.topics[topic] = qs
			}
			qs[name] = QueueData{BrokerName: name, ReadQueueNums: tc.ReadQueueNums, WriteQueueNums: tc.WriteQueueNums,
				Perm: tc.Perm, TopicSysFlag: tc.TopicSysFlag}
		}
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	if master, ok := g.addrs[MasterID]; ok && id != MasterID {
		resp.Set("masterAddr", master)
		if mb := s.live[master]; mb != nil {
			resp.Set("haServerAddr", mb.haAddr)
		}
	}
	return resp
}

// Route returns a topic's route; ok is false when no live broker serves it.
func (s *Server) Route(topic string) (TopicRouteData, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	qs := s.topics[topic]
	if len(qs) == 0 {
		return TopicRouteData{}, false
	}
	rd := TopicRouteData{QueueDatas: []QueueData{}, BrokerDatas: []BrokerData{}, FilterServerTable: map[string][]string{}}
	names := make([]string, 0, len(qs))
	for name := range qs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rd.QueueDatas = append(rd.QueueDatas, qs[name])
		g := s.groups[name]
		if g == nil {
			continue
		}
		bd := BrokerData{Cluster: g.cluster, BrokerName: name, BrokerAddrs: map[int64]string{}}
		for id, addr := range g.addrs {
			bd.BrokerAddrs[id] = addr
		}
		rd.BrokerDatas = append(rd.BrokerDatas, bd)
	}
	return rd, true
}

func (s *Server) route(req *remoting.Command) *remoting.Command {
	topic := req.Field("topic")
	rd, ok := s.Route(topic)
	if !ok {
		return remoting.NewResponse(req, remoting.TopicNotExist, fmt.Sprintf("no route for topic %q: no live broker serves it", topic))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = encode(rd)
	return resp
}

func (s *Server) clusterInfo() ClusterInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	ci := ClusterInfo{BrokerAddrTable: map[string]BrokerData{}, ClusterAddrTable: map[string][]string{}}
	for name, g := range s.groups {
		bd := BrokerData{Cluster: g.cluster, BrokerName: name, BrokerAddrs: map[int64]string{}}
		for id, addr := range g.addrs {
			bd.BrokerAddrs[id] = addr
		}
		ci.BrokerAddrTable[name] = bd
		ci.ClusterAddrTable[g.cluster] = append(ci.ClusterAddrTable[g.cluster], name)
	}
	for _, names := range ci.ClusterAddrTable {
		slices.Sort(names)
	}
	return ci
}

// Topics lists the topics some live broker serves.
func (s *Server) Topics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.topics))
	for t := range s.topics {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Brokers lists the live brokers as "name/id=addr".
func (s *Server) Brokers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for addr, b := range s.live {
		out = append(out, b.name+"/"+strconv.FormatInt(b.id, 10)+"="+addr)
	}
	slices.Sort(out)
	return out
}
