package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/internal/tcpproxy"
	"golang.org/x/sys/unix"
)

// The replication axis (--replication none,async,sync): the store under
// test is a master (engine.Open with Role ASYNC_MASTER or SYNC_MASTER and an
// ha.Master on a loopback port), and its slave runs in a process of its
// own — this executable re-executed as a worker of kind "slave", which
// opens a slave store in its own directory (another device with
// --slave-dir) and replicates over the same ha package `mqstore slave`
// uses. A worker rather than `mqstore slave` because the harness needs
// exact, machine-readable readings of the slave at the window's edges (its
// CommitLog end, flushed offset and process CPU, asked for over a pipe
// and answered in JSON at once), where `mqstore slave` logs text at a
// --status-interval; because it needs no second binary built; and because
// the harness's workers already die with it (PR_SET_PDEATHSIG) and are
// ended on every path. --ha-delay puts internal/tcpproxy between the two:
// a one-way delay in each direction, an EMULATED network (both ends run on
// this machine).

const (
	workerSlave = "slave" // the slave's worker kind
	// slaveConnectTimeout bounds how long a repeat waits for its slave to
	// connect and report; slaveAnswerTimeout one answer of the slave process.
	slaveConnectTimeout = 30 * time.Second
	slaveAnswerTimeout  = 30 * time.Second
	// minCatchUp is the least time the harness waits after the window for
	// the slave to acknowledge what the master wrote (twice the window when
	// that is longer); records it has not acknowledged by then are "unacked".
	minCatchUp = 10 * time.Second
)

// slaveCommand is what the harness sends the slave worker, one JSON value
// per request; closing its stdin stops it.
type slaveCommand struct {
	Cmd string `json:"cmd"` // "status"
}

// slaveStatus is the slave worker's answer: its CommitLog end and flushed
// offset, what it reported to the master, whether it runs, and its
// process's CPU so far (getrusage; CPUError when it could not be read).
type slaveStatus struct {
	UnixNs     int64  `json:"unixNs"`
	Wrote      int64  `json:"wrote"`
	Flushed    int64  `json:"flushed"`
	Acked      int64  `json:"acked"`
	CPUUserNs  int64  `json:"cpuUserNs"`
	CPUSysNs   int64  `json:"cpuSysNs"`
	CPUError   string `json:"cpuError,omitempty"`
	Connected  bool   `json:"connected"`
	Connects   int    `json:"connects"`
	LastError  string `json:"lastError,omitempty"`
	RunError   string `json:"runError,omitempty"`
	CloseError string `json:"closeError,omitempty"`
	Final      bool   `json:"final,omitempty"`
	OpenError  string `json:"openError,omitempty"`
}

// slaveWorker is the slave process: it opens a slave store, replicates
// the master at req.Master until its stdin ends (or it is signalled),
// answers every command with its status, then closes the store and
// answers once more (Final).
func slaveWorker(ctx context.Context, req workerRequest, dec *json.Decoder, out io.Writer) error {
	enc := json.NewEncoder(out)
	opts, err := storeOptions(req.Store, req.Backend, req.Flush)
	if err != nil {
		return enc.Encode(slaveStatus{Final: true, OpenError: err.Error()})
	}
	opts.Role = engine.Slave
	s, err := engine.Open(ctx, req.Dir, opts)
	if err != nil {
		return enc.Encode(slaveStatus{Final: true, OpenError: fmt.Sprintf("open the slave store: %v", err)})
	}
	sl, err := ha.NewSlave(s, ha.SlaveOptions{MasterAddress: req.Master, ReconnectMinBackoff: 10 * time.Millisecond,
		ReconnectMaxBackoff: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return errors.Join(enc.Encode(slaveStatus{Final: true, OpenError: err.Error()}), s.Close())
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone := make(chan error, 1) // Run's error, then closed
	go func() { runDone <- sl.Run(rctx); close(runDone) }()
	var runErr error
	status := func() slaveStatus {
		if runErr == nil {
			select {
			case runErr = <-runDone:
			default:
			}
		}
		st := sl.Status()
		out := slaveStatus{UnixNs: time.Now().UnixNano(), Wrote: st.Offset, Flushed: st.FlushedOffset, Acked: st.AckedOffset,
			Connected: st.Connected, Connects: st.Connects, LastError: st.LastError}
		if runErr != nil {
			out.RunError = runErr.Error()
		}
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			out.CPUError = "getrusage: " + err.Error()
		} else {
			out.CPUUserNs, out.CPUSysNs = ru.Utime.Nano(), ru.Stime.Nano()
		}
		return out
	}
	if err := enc.Encode(status()); err != nil { // ready
		return err
	}
	for {
		var cmd slaveCommand
		if err := dec.Decode(&cmd); err != nil {
			break // stdin closed: stop
		}
		if err := enc.Encode(status()); err != nil {
			break
		}
	}
	cancel()
	if runErr == nil {
		runErr = <-runDone
	}
	final := status()
	final.Final = true
	if err := s.Close(); err != nil {
		final.CloseError = err.Error()
	}
	final.Flushed = s.FlushedOffset() // what the close made durable
	return enc.Encode(final)
}

// slaveProc is a running slave worker.
type slaveProc struct {
	w       *worker
	answers chan slaveAnswer
	enc     *json.Encoder
	stopped bool
}

type slaveAnswer struct {
	st  slaveStatus
	err error
}

// startSlave starts a slave process replicating master into dir and waits
// for its first answer (its store is open).
func startSlave(ctx context.Context, store StoreConfig, dir, backend, flush, master string) (*slaveProc, error) {
	w, err := startWorker(ctx, workerRequest{Kind: workerSlave, Store: store, Backend: backend, Flush: flush, Dir: dir, Master: master}, nil)
	if err != nil {
		return nil, fmt.Errorf("start the slave: %w", err)
	}
	p := &slaveProc{w: w, answers: make(chan slaveAnswer, 1), enc: json.NewEncoder(w.stdin)}
	go func() {
		dec := json.NewDecoder(w.stdout)
		for {
			var st slaveStatus
			if err := dec.Decode(&st); err != nil {
				p.answers <- slaveAnswer{err: fmt.Errorf("the slave process: %w", err)}
				close(p.answers)
				return
			}
			p.answers <- slaveAnswer{st: st}
		}
	}()
	st, err := p.answer()
	if err == nil && st.OpenError != "" {
		err = errors.New(st.OpenError)
	}
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("start the slave: %w%s", err, p.stderr())
	}
	return p, nil
}

func (p *slaveProc) answer() (slaveStatus, error) {
	select {
	case a, ok := <-p.answers:
		if !ok {
			return slaveStatus{}, errors.New("the slave process ended")
		}
		return a.st, a.err
	case <-time.After(slaveAnswerTimeout):
		return slaveStatus{}, fmt.Errorf("the slave process did not answer within %v", slaveAnswerTimeout)
	}
}

func (p *slaveProc) status() (slaveStatus, error) {
	if err := p.enc.Encode(slaveCommand{Cmd: "status"}); err != nil {
		return slaveStatus{}, fmt.Errorf("ask the slave: %w", err)
	}
	st, err := p.answer()
	if err == nil && st.RunError != "" {
		err = fmt.Errorf("the slave stopped replicating: %s", st.RunError)
	}
	return st, err
}

// stop ends the slave cleanly (its store closed) and waits for the
// process; it kills it when it does not end in time. Its last answer says
// whether replication and the close went well.
func (p *slaveProc) stop() (slaveStatus, error) {
	if p.stopped {
		return slaveStatus{}, nil
	}
	p.stopped = true
	p.w.stdin.Close()
	st, err := p.answer()
	if err != nil {
		p.kill()
		return st, fmt.Errorf("%w%s", err, p.stderr())
	}
	done := make(chan error, 1)
	go func() { done <- p.w.cmd.Wait() }()
	select {
	case werr := <-done:
		if werr != nil {
			err = fmt.Errorf("the slave process: %w%s", werr, p.stderr())
		}
	case <-time.After(slaveAnswerTimeout):
		p.kill()
		err = fmt.Errorf("the slave process did not exit within %v of its last answer; killed", slaveAnswerTimeout)
	}
	switch {
	case err != nil:
	case st.RunError != "":
		err = fmt.Errorf("the slave stopped replicating: %s", st.RunError)
	case st.CloseError != "":
		err = fmt.Errorf("the slave's store did not close cleanly: %s", st.CloseError)
	}
	return st, err
}

// kill ends the slave process at once (every failure path).
func (p *slaveProc) kill() {
	p.stopped = true
	p.w.kill()
}

func (p *slaveProc) stderr() string {
	if s := strings.TrimSpace(p.w.stderr.String()); s != "" {
		return "; stderr: " + s
	}
	return ""
}

// putMark is one acknowledged Put, on the tracker's clock: when it began
// (the record is appended then), where its record ends, and the slave's
// acknowledged offset when the Put returned.
type putMark struct {
	start, end, ackedAtReturn int64
}

// ackPoint is the master's replicated offset from a moment on.
type ackPoint struct {
	at, offset int64
}

// lagTracker measures replication lag: each worker keeps marks of its
// Puts (every one, until its share of maxMarks is full; then every other
// one is dropped and only every second Put is kept from then on, so the
// marks stay an even sample of the window), and one goroutine keeps the
// timeline of the master's replicated offset.
type lagTracker struct {
	base    time.Time
	workers []lagWorker
	acks    []ackPoint // written by the watcher only, read after it ended
	// window edges, set between the phases (no Put runs then)
	winStart, winEnd int64
}

// maxMarks bounds the marks of one repeat (24 bytes each).
const maxMarks = 1 << 20

type lagWorker struct {
	marks        []putMark
	stride, seen int64
	_            [40]byte // keeps workers' counters off each other's cache lines
}

func newLagTracker(workers int) *lagTracker {
	t := &lagTracker{base: time.Now(), workers: make([]lagWorker, workers), winStart: -1, winEnd: math.MaxInt64}
	per := max(maxMarks/max(workers, 1), 1024)
	for i := range t.workers {
		t.workers[i] = lagWorker{marks: make([]putMark, 0, per), stride: 1}
	}
	return t
}

// now is the tracker's clock (monotonic ns).
func (t *lagTracker) now() int64 { return int64(time.Since(t.base)) }

func (t *lagTracker) mark(worker int, m putMark) {
	w := &t.workers[worker]
	w.seen++
	if w.seen%w.stride != 0 {
		return
	}
	if len(w.marks) == cap(w.marks) {
		// Keep the marks of every second kept Put (the ones at even
		// multiples of the stride), and keep every second from now on.
		kept := w.marks[:0]
		for i := 1; i < len(w.marks); i += 2 {
			kept = append(kept, w.marks[i])
		}
		w.marks = kept
		w.stride *= 2
		if w.seen%w.stride != 0 {
			return
		}
	}
	w.marks = append(w.marks, m)
}

// watch keeps the timeline of the acknowledged offset until ctx ends:
// acked reads it, waitAbove waits until it exceeds an offset (or fails).
func (t *lagTracker) watch(ctx context.Context, acked func() int64, waitAbove func(ctx context.Context, offset int64) error) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := int64(math.MinInt64)
		for {
			off := acked()
			if off != last {
				t.acks = append(t.acks, ackPoint{at: t.now(), offset: off})
				last = off
			}
			if err := waitAbove(ctx, off+1); err != nil {
				return
			}
		}
	}()
	return done
}

// lastAck records the acknowledged offset once the watch has stopped:
// the acknowledgement that ended the catch-up can arrive as the watch is
// cancelled, and would otherwise leave the last records unacknowledged.
// Its time is now, a bound from above. Call it after watch's channel
// closed.
func (t *lagTracker) lastAck(off int64) {
	if n := len(t.acks); n == 0 || t.acks[n-1].offset < off {
		t.acks = append(t.acks, ackPoint{at: t.now(), offset: off})
	}
}

func (t *lagTracker) allMarks() []putMark {
	var out []putMark
	for i := range t.workers {
		out = append(out, t.workers[i].marks...)
	}
	return out
}

// computeLag derives the lag of the marks whose Put began in [winStart,
// winEnd] from the acknowledgement timeline, with deadline the time after
// which nothing more was watched: in time, from the Put's start to the
// first acknowledgement covering its record's end (unacknowledged by the
// deadline: deadline − start, a lower bound, and counted); in bytes, how
// far the slave's acknowledged offset was behind the record's end when the
// Put returned (recorded + 1: the histogram's least value is 1).
func computeLag(marks []putMark, acks []ackPoint, winStart, winEnd, deadline int64) runfile.ReplicationResult {
	r := runfile.ReplicationResult{LagNs: load.NewHistogram(), LagBytes: load.NewHistogram(), Sampled: int64(len(marks)), DeadlineNs: deadline - winEnd}
	for _, a := range acks {
		if a.at >= winStart && a.at <= deadline {
			r.Acks++
		}
	}
	for _, m := range marks {
		if m.start < winStart || m.start > winEnd {
			continue
		}
		r.Records++
		i := sort.Search(len(acks), func(i int) bool { return acks[i].offset >= m.end })
		if i == len(acks) || acks[i].at > deadline {
			r.Unacked++
			r.LagNs.Record(time.Duration(deadline - m.start))
		} else {
			r.LagNs.Record(time.Duration(max(acks[i].at-m.start, 0)))
		}
		r.LagBytes.Record(time.Duration(max(m.end-max(m.ackedAtReturn, 0), 0) + 1))
	}
	return r
}

// replDurability is load.Durability for a master: the store's positions
// (storeDurability), and at the window's edges the tracker's window and
// the slave's own positions.
type replDurability struct {
	storeDurability
	tr      *lagTracker
	slave   *slaveProc
	edges   int
	slaveAt [2]slaveStatus
	repl    [2]engine.ReplicationStats
	err     error
}

func (d *replDurability) Positions() (int64, int64) {
	w, f := d.storeDurability.Positions()
	if d.edges < 2 {
		now := d.tr.now()
		if d.edges == 0 {
			d.tr.winStart = now
		} else {
			d.tr.winEnd = now
		}
		st, err := d.slave.status()
		if err != nil && d.err == nil {
			d.err = err
		}
		d.slaveAt[d.edges], d.repl[d.edges] = st, d.s.ReplicationStats()
		d.edges++
	}
	return w, f
}

// masterSide is a replicated cell's master: the store, its ha.Master, the
// EMULATED delay's proxy when there is one, and the address the slave
// dials.
type masterSide struct {
	s       *engine.Store
	m       *ha.Master
	addr    string
	closers []func() error
}

// open opens the store as a master with sys's role and options (aged
// first: ageStore), its ha.Master on a loopback port and the proxy; it
// returns the store's options and their record (optionsMap).
func (ms *masterSide) open(ctx context.Context, store StoreConfig, dir string, sys system) (engine.Options, map[string]string, error) {
	opts, err := storeOptions(store, sys.backend, sys.pol.Flush)
	if err != nil {
		return opts, nil, err
	}
	opts.Role = replicationRole(sys.repl)
	if err := ageStore(ctx, store, dir, sys.backend); err != nil {
		return opts, nil, err
	}
	if ms.s, err = engine.Open(ctx, dir, opts); err != nil {
		return opts, nil, fmt.Errorf("open the master (%s): %w", sys.backend, err)
	}
	options := optionsMap(ms.s.Options())
	ms.closers = append(ms.closers, ms.s.Close)
	if ms.m, err = ha.NewMaster(ms.s, ha.MasterOptions{ListenAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return opts, options, err
	}
	ms.closers = append(ms.closers, ms.m.Close)
	ms.addr = ms.m.Addr().String()
	if d := sys.delay; d > 0 {
		p, err := tcpproxy.New("127.0.0.1:0", ms.addr, tcpproxy.Options{Delay: d})
		if err != nil {
			return opts, options, err
		}
		ms.closers = append(ms.closers, p.Close)
		ms.addr = p.Addr()
	}
	return opts, options, nil
}

// close closes what open opened, last first (a no-op the second time).
func (ms *masterSide) close() error {
	var errs []error
	for i := len(ms.closers) - 1; i >= 0; i-- {
		errs = append(errs, ms.closers[i]())
	}
	ms.closers = nil
	return errors.Join(errs...)
}

// replicatedCPU is a replicated cell's options["cpu"]: what its CPU
// figures count.
const replicatedCPU = "the master's process and the slave's (each its getrusage; the slave's read at the window's edges)"

// runReplicatedRepeat runs one repeat of spec on a master whose slave runs in
// its own process in slaveDir, with the EMULATED delay between them when
// sys has one; it measures the lag, the slave's durable rate and the
// replication backlog beside the master's figures, and counts the slave's
// CPU with the master's, then ends the slave, the proxy and the master.
func runReplicatedRepeat(ctx context.Context, store StoreConfig, dir, slaveDir string, sys system, spec load.Spec) (runfile.Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	defer os.RemoveAll(slaveDir)
	ms := &masterSide{}
	defer ms.close()
	opts, options, err := ms.open(ctx, store, dir, sys)
	if err != nil {
		return setupFailed(ctx, err), options
	}
	s, m := ms.s, ms.m
	slave, err := startSlave(ctx, store, slaveDir, sys.backend, sys.pol.Flush, ms.addr)
	if err != nil {
		return failedRepeat(err), options
	}
	defer slave.kill() // a no-op once stopped
	wctx, cancel := context.WithTimeout(ctx, slaveConnectTimeout)
	err = m.WaitSlaves(wctx, 1)
	cancel()
	if err != nil {
		st, _ := slave.status()
		return failedRepeat(fmt.Errorf("the slave did not connect: %w (slave: %+v)", err, st)), options
	}
	tr := newLagTracker(spec.Workers())
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := tr.watch(watchCtx, s.ReplicatedOffset, m.WaitAcked)
	d := &replDurability{storeDurability: storeDurability{s: s}, tr: tr, slave: slave}
	res := load.Run(ctx, spec, nil, d, replicatedPuts(s, tr, store.Message, spec.SizeBytes))
	// The system is two processes: its CPU is the master's (load.Run's
	// getrusage) and the slave's over the window.
	slaveUser, slaveSys, cpuErr := d.slaveCPU()
	if cpuErr != nil {
		res.CPUUserNs, res.CPUSysNs = 0, 0
		options["cpu"] = "not measured: " + cpuErr.Error()
	} else {
		res.CPUUserNs, res.CPUSysNs = res.CPUUserNs+slaveUser, res.CPUSysNs+slaveSys
		options["cpu"] = replicatedCPU
	}
	deadline := catchUp(ctx, tr, m, s.Stats().WroteOffset, spec.Duration)
	stopWatch()
	<-watched
	tr.lastAck(s.ReplicatedOffset())
	rr := computeLag(tr.allMarks(), tr.acks, tr.winStart, tr.winEnd, min(deadline, tr.now()))
	rr.Role, rr.SlaveBackend, rr.SlaveFlush, rr.SlaveDir, rr.HADelayNs = opts.Role.String(), sys.backend, sys.pol.Flush, slaveDir, sys.delay.Nanoseconds()
	d.slaveEdges(&rr)
	_, stopErr := slave.stop()
	closeMaster := ms.close() // the master, the proxy, then the store (Close timed with them)
	rep := repeatOf(res, d.counters())
	rep.Replication = &rr
	rep.Figures.AddReplication(&rr)
	if d.edges == 2 {
		rep.Figures.AddReplicationPositions(&rr, res.Durability)
	}
	if cpuErr == nil && rep.Figures.CPUSecPerGiB > 0 && res.PayloadBytes > 0 {
		rep.Figures.SlaveCPUSecPerGiB = float64(slaveUser+slaveSys) / 1e9 / (float64(res.PayloadBytes) / (1 << 30))
	}
	if rep.Status != runfile.StatusFailed && rep.Status != runfile.StatusInterrupted {
		switch {
		case d.err != nil:
			rep.Status, rep.Reason = runfile.StatusFailed, d.err.Error()
		case stopErr != nil:
			rep.Status, rep.Reason = runfile.StatusFailed, stopErr.Error()
		case closeMaster != nil:
			rep.Status, rep.Reason = runfile.StatusFailed, "close: "+closeMaster.Error()
		}
	}
	return rep, options
}

// replicatedPuts is the replicated cell's producer: a Put whose start,
// record end and acknowledged offset at return the lag tracker marks.
func replicatedPuts(s *engine.Store, tr *lagTracker, message string, size int) func(worker int) load.Op {
	return func(worker int) load.Op {
		g := newProducerMessages(message, worker, size)
		return func(ctx context.Context) error {
			start := tr.now()
			r, err := s.Put(ctx, g.next())
			if err != nil {
				return err
			}
			tr.mark(worker, putMark{start: start, end: r.PhysicalOffset + int64(r.Size), ackedAtReturn: s.ReplicatedOffset()})
			return nil
		}
	}
}

// catchUp waits for the slave's acknowledgement of everything written
// (wroteEnd), for as long as the catch-up after the window allows, and
// returns that deadline (what the slave did not acknowledge by then is
// counted as unacked).
func catchUp(ctx context.Context, tr *lagTracker, m *ha.Master, wroteEnd int64, window time.Duration) int64 {
	deadline := tr.winEnd + max(minCatchUp, 2*window).Nanoseconds()
	if tr.winEnd == math.MaxInt64 { // the window never ended (a failed run)
		deadline = tr.now()
	}
	actx, cancel := context.WithTimeout(ctx, time.Duration(max(deadline-tr.now(), 0)))
	defer cancel()
	_ = m.WaitAcked(actx, wroteEnd)
	return deadline
}

// slaveCPU is the slave process's CPU between its readings at the
// window's edges (which bracket the master's own CPU readings).
func (d *replDurability) slaveCPU() (user, sys int64, err error) {
	if d.edges != 2 || d.err != nil {
		return 0, 0, errors.New("the slave was not read at both edges of the window")
	}
	a, b := d.slaveAt[0], d.slaveAt[1]
	if e := cmp.Or(a.CPUError, b.CPUError); e != "" {
		return 0, 0, fmt.Errorf("the slave's CPU: %s", e)
	}
	if b.CPUUserNs < a.CPUUserNs || b.CPUSysNs < a.CPUSysNs {
		return 0, 0, errors.New("the slave's CPU went back during the window")
	}
	return b.CPUUserNs - a.CPUUserNs, b.CPUSysNs - a.CPUSysNs, nil
}

// slaveEdges records the slave's own positions and the master's
// replication counters at the window's edges.
func (d *replDurability) slaveEdges(rr *runfile.ReplicationResult) {
	if d.edges != 2 {
		return
	}
	a, b := d.slaveAt[0], d.slaveAt[1]
	rr.SlaveWroteStart, rr.SlaveFlushedStart, rr.SlaveWroteEnd, rr.SlaveFlushedEnd = a.Wrote, a.Flushed, b.Wrote, b.Flushed
	rr.SlaveElapsedNs = b.UnixNs - a.UnixNs
	rr.FlushSlaveTimeouts = d.repl[1].FlushSlaveTimeouts - d.repl[0].FlushSlaveTimeouts
	rr.SlaveNotAvailable = d.repl[1].SlaveNotAvailable - d.repl[0].SlaveNotAvailable
}
