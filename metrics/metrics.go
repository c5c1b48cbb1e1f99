// Package metrics exports a store's (and a broker's) figures to Prometheus
// with client_golang, so the engine itself has no such dependency. Names
// follow OpenMetrics: base units in the name, _total on counters, _seconds
// histograms. A Collector reads Store.Stats once per scrape; remoting
// requests are counted as the broker serves them.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector exports one store's figures.
type Collector struct {
	store *engine.Store
	// slaveLags, when set, returns each connected slave's lag in bytes by
	// its address (a master's HA): it adds the slaves the store's own
	// reports do not list yet (connected, not yet verified).
	slaveLags func() map[string]int64
	opened    time.Time

	info, puts, putBytes, putDuration, flushes, flushDuration, commits, commitDuration    *prometheus.Desc
	gets, gotMessages, rolls, segments, offsets, flushBehind, dispatchBehind, lockedBytes *prometheus.Desc
	writeStopped, dispatchStopped, slaveLag, slaveAcked, slaveInSync                      *prometheus.Desc
	consumeQueues, consumeQueueMessages, consumeQueueBytes, lockHeld                      *prometheus.Desc
}

// NewCollector returns a collector of store; slaveLags may be nil.
func NewCollector(store *engine.Store, slaveLags func() map[string]int64) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("mqstore_"+name, help, labels, nil)
	}
	return &Collector{store: store, slaveLags: slaveLags, opened: time.Now(),
		info:           d("store_info", "The store's backend, flush mode and replication role (always 1).", "backend", "flush_mode", "role"),
		puts:           d("puts_total", "Puts by status (PUT_OK, FLUSH_DISK_TIMEOUT, OS_PAGE_CACHE_BUSY, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, OTHER).", "status"),
		putBytes:       d("put_bytes_total", "Bytes of the records successful puts appended."),
		putDuration:    d("put_duration_seconds", "How long successful puts took (flush and replica waits included)."),
		flushes:        d("flushes_total", "CommitLog flushes."),
		flushDuration:  d("flush_duration_seconds", "How long CommitLog flushes took."),
		commits:        d("commits_total", "Commits of written bytes to the file (buffered backends)."),
		commitDuration: d("commit_duration_seconds", "How long commits took (buffered backends)."),
		gets:           d("get_requests_total", "Reads of a consume queue (pulls)."),
		gotMessages:    d("get_messages_total", "Messages the reads returned."),
		rolls:          d("commitlog_segment_rolls_total", "CommitLog segment rolls."),
		segments:       d("commitlog_segments", "CommitLog segments held."),
		offsets:        d("commitlog_offset_bytes", "CommitLog positions: min (first stored byte), write, committed, flushed, dispatched.", "position"),
		flushBehind:    d("flush_behind_bytes", "Bytes written but not yet flushed."),
		dispatchBehind: d("dispatch_behind_bytes", "Bytes written but not yet dispatched to the consume queues and the index."),
		lockedBytes:    d("memory_locked_bytes", "Memory the backends hold mlocked."),
		writeStopped:   d("write_stopped", "1 when an I/O error stopped writes (puts answer SERVICE_NOT_AVAILABLE until the store is reopened)."),
		dispatchStopped: d("dispatch_stopped",
			"1 when an error stopped dispatch (puts answer SERVICE_NOT_AVAILABLE until the store is reopened)."),
		slaveLag: d("ha_lag_bytes", "How far each connected slave's acknowledged offset is behind the master's CommitLog.", "slave"),
		slaveAcked: d("ha_slave_acked_offset_bytes",
			"The CommitLog offset each verified slave acknowledged (what its flush mode made durable there).", "slave"),
		slaveInSync: d("ha_slave_in_sync",
			"1 when a verified slave is a member of the store's in-sync set (within InSyncMaxLagBytes of the master), else 0.", "slave"),
		consumeQueues:        d("consumequeues", "ConsumeQueues open (one per topic and queue id)."),
		consumeQueueMessages: d("consumequeue_messages", "Messages the ConsumeQueues index (max minus min offset, summed)."),
		consumeQueueBytes:    d("consumequeue_file_bytes", "Size of the ConsumeQueue files (whole preallocated files)."),
		lockHeld: d("append_lock_held_seconds",
			"How long the current holder of the CommitLog append lock has held it, 0 when free (puts answer OS_PAGE_CACHE_BUSY past the store's limit)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.puts, c.putBytes, c.putDuration, c.flushes, c.flushDuration, c.commits,
		c.commitDuration, c.gets, c.gotMessages, c.rolls, c.segments, c.offsets, c.flushBehind, c.dispatchBehind, c.lockedBytes,
		c.writeStopped, c.dispatchStopped, c.slaveLag, c.slaveAcked, c.slaveInSync, c.consumeQueues, c.consumeQueueMessages, c.consumeQueueBytes,
		c.lockHeld} {
		ch <- d
	}
}

func (c *Collector) counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(d, prometheus.CounterValue, float64(v), c.opened, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (c *Collector) histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, lb engine.LatencyBuckets) {
	buckets := make(map[float64]uint64, len(lb.Bounds))
	for i, b := range lb.Bounds {
		buckets[b.Seconds()] = lb.Cumulative[i]
	}
	ch <- prometheus.MustNewConstHistogramWithCreatedTimestamp(d, lb.Count, lb.Sum.Seconds(), buckets, c.opened)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	rs := c.store.ReplicationStats()
	gauge(ch, c.info, 1, st.Backend, st.FlushMode, rs.Role)
	known := st.FlushDiskTimeouts + st.OSPageCacheBusy + rs.FlushSlaveTimeouts + rs.SlaveNotAvailable
	other := uint64(0)
	if st.PutFailures > known {
		other = st.PutFailures - known
	}
	for _, s := range []struct {
		status string
		n      uint64
	}{{"PUT_OK", st.Puts}, {"FLUSH_DISK_TIMEOUT", st.FlushDiskTimeouts}, {"OS_PAGE_CACHE_BUSY", st.OSPageCacheBusy},
		{"FLUSH_SLAVE_TIMEOUT", rs.FlushSlaveTimeouts}, {"SLAVE_NOT_AVAILABLE", rs.SlaveNotAvailable}, {"OTHER", other}} {
		c.counter(ch, c.puts, s.n, s.status)
	}
	c.counter(ch, c.putBytes, st.PutBytes)
	c.histogram(ch, c.putDuration, c.store.PutLatencyBuckets())
	c.counter(ch, c.flushes, st.Flushes)
	c.histogram(ch, c.flushDuration, c.store.FlushLatencyBuckets())
	c.counter(ch, c.commits, st.Commits)
	c.histogram(ch, c.commitDuration, c.store.CommitLatencyBuckets())
	c.counter(ch, c.gets, st.Gets)
	c.counter(ch, c.gotMessages, st.GotMessages)
	c.counter(ch, c.rolls, st.Rolls)
	gauge(ch, c.segments, float64(st.Segments))
	for _, p := range []struct {
		name string
		v    int64
	}{{"min", st.MinOffset}, {"write", st.WroteOffset}, {"committed", st.CommittedOffset}, {"flushed", st.FlushedOffset},
		{"dispatched", st.DispatchedOffset}} {
		gauge(ch, c.offsets, float64(p.v), p.name)
	}
	gauge(ch, c.flushBehind, float64(st.BytesBehindFlush))
	gauge(ch, c.dispatchBehind, float64(max(st.WroteOffset-st.DispatchedOffset, 0)))
	gauge(ch, c.lockedBytes, float64(st.LockedBytes))
	gauge(ch, c.writeStopped, boolGauge(st.WriteError != ""))
	gauge(ch, c.dispatchStopped, boolGauge(st.DispatchError != ""))
	gauge(ch, c.lockHeld, c.store.AppendLockHeldFor().Seconds())
	cq := c.store.ConsumeQueueStats()
	gauge(ch, c.consumeQueues, float64(cq.Queues))
	gauge(ch, c.consumeQueueMessages, float64(cq.Units))
	gauge(ch, c.consumeQueueBytes, float64(cq.FileBytes))
	// Each slave's lag from the store's reports (what SYNC_MASTER puts wait
	// on), then the connected slaves they do not list yet.
	end := c.store.CommitLogReader().End()
	inSync := map[string]bool{}
	for _, a := range rs.InSync {
		inSync[a] = true
	}
	seen := map[string]bool{}
	for _, sl := range c.store.SlaveReports() {
		if seen[sl.Addr] {
			continue
		}
		seen[sl.Addr] = true
		gauge(ch, c.slaveLag, float64(max(end-sl.AckedOffset, 0)), sl.Addr)
		gauge(ch, c.slaveAcked, float64(sl.AckedOffset), sl.Addr)
		gauge(ch, c.slaveInSync, boolGauge(inSync[sl.Addr]), sl.Addr)
	}
	if c.slaveLags != nil {
		for addr, lag := range c.slaveLags() {
			if !seen[addr] {
				gauge(ch, c.slaveLag, float64(lag), addr)
			}
		}
	}
}

// Remoting counts the remoting requests a broker serves, by request code
// and response code; its Observe is broker.Options.OnRequest.
type Remoting struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewRemoting returns request metrics, registered with reg.
func NewRemoting(reg prometheus.Registerer) (*Remoting, error) {
	r := &Remoting{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mqstore_remoting_requests_total",
			Help: "Remoting requests served, by request code and response code (-1: no response)."}, []string{"code", "response"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mqstore_remoting_request_duration_seconds",
			Help:    "How long requests took to serve, by request code (a long-polled pull includes its hold).",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30}}, []string{"code"}),
	}
	for _, c := range []prometheus.Collector{r.requests, r.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register remoting metrics: %w", err)
		}
	}
	return r, nil
}

// Observe records one served request.
func (r *Remoting) Observe(code, response int16, took time.Duration) {
	c := strconv.Itoa(int(code))
	r.requests.WithLabelValues(c, strconv.Itoa(int(response))).Inc()
	r.duration.WithLabelValues(c).Observe(took.Seconds())
}

// Server serves a registry at /metrics.
type Server struct {
	ln  net.Listener
	srv *http.Server
	err chan error
}

// Listen serves reg's metrics on addr (a bare ":PORT" binds loopback) at
// /metrics, in OpenMetrics when the scraper asks for it.
func Listen(addr string, reg *prometheus.Registry, log *slog.Logger) (*Server, error) {
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, err: make(chan error, 1)}
	go func() { s.err <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the metrics are served on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.err; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
