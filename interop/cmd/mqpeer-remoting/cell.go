package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	_ "github.com/mqstore/mqstore/backends" // the broker's backends, for their durability statements
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

const (
	clientModule  = "github.com/apache/rocketmq-client-go/v2"
	topic         = "mqbench"
	consumerGroup = "mqbench-consumer"
	producerGroup = "mqbench-producer"
)

// clientVersion is the rocketmq-client-go version linked into this program.
func clientVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == clientModule {
				if d.Replace != nil && d.Replace.Version != "" {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

// runCell runs the workload and fills out's description.
func runCell(ctx context.Context, cfg config, out *load.PeerOutput) (load.Result, error) {
	rlog.SetLogLevel("error")
	log := quiet(cfg.logOutput)
	version := clientVersion()
	out.Label, out.Version = label(version, cfg.backend, cfg.flush), version
	dur, err := durability(cfg)
	if err != nil {
		return load.Result{}, err
	}
	out.Durability = dur
	bin, err := mqstorePath(cfg.mqstore)
	if err != nil {
		return load.Result{}, err
	}
	out.Options = map[string]string{"client": clientModule + " " + version, "producerClients": strconv.Itoa(cfg.clients),
		"goroutines": strconv.Itoa(cfg.spec.Workers()), "send": "SendSync, no client retry, bodies over 4 KiB zlib-compressed by the client",
		"consumer": "one push consumer (clustering, pull batch 32, long polls woken by dispatch)", "queues": strconv.Itoa(cfg.queues),
		"backend": cfg.backend, "flush": cfg.flush, "segmentSizeBytes": strconv.FormatInt(cfg.segment, 10), "broker": brokerVersion(bin), "transport": "TCP on 127.0.0.1"}

	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: log})
	if err != nil {
		return load.Result{}, err
	}
	defer ns.Close()
	bp, err := startBroker(ctx, bin, cfg, ns.Addr())
	if err != nil {
		return load.Result{}, err
	}
	defer bp.stop()
	if err := createTopic(ctx, bp.addr, cfg.queues, log); err != nil {
		return load.Result{}, bp.explain(err)
	}

	res, err := measure(ctx, cfg, ns.Addr(), bp.cmd.Process.Pid, out.Options)
	if err != nil {
		return res, bp.explain(err)
	}
	if err := bp.stop(); err != nil {
		return res, err
	}
	return res, nil
}

// measure runs the producers' workload with the consumer receiving; the
// CPU it reports is this process's and the broker's (brokerPid), and
// options["cpu"] says so.
func measure(ctx context.Context, cfg config, nsAddr string, brokerPid int, options map[string]string) (load.Result, error) {
	resolver := primitive.NewPassthroughResolver([]string{nsAddr})
	producers := make([]rocketmq.Producer, cfg.clients)
	for i := range producers {
		p, err := rocketmq.NewProducer(producer.WithNsResolver(resolver), producer.WithGroupName(producerGroup),
			producer.WithInstanceName(fmt.Sprintf("mqbench-producer-%d-%d", os.Getpid(), i)), producer.WithRetry(0))
		if err == nil {
			err = p.Start()
		}
		if err != nil {
			return load.Result{}, fmt.Errorf("producer client %d: %w", i, err)
		}
		defer p.Shutdown()
		producers[i] = p
	}

	var (
		probes, consumed, delivered atomic.Int64
		windowStart, windowEnd      atomic.Int64
		mu                          sync.Mutex
		hist                        = load.NewHistogram()
	)
	windowStart.Store(1<<63 - 1)
	c, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(resolver), consumer.WithGroupName(consumerGroup),
		consumer.WithInstance(fmt.Sprintf("mqbench-consumer-%d", os.Getpid())), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err == nil {
		err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			now := time.Now().UnixNano()
			for _, m := range msgs {
				s := stampOf(m.Body)
				if s == 0 {
					probes.Add(1)
					continue
				}
				consumed.Add(1)
				if s >= windowStart.Load() && s < windowEnd.Load() {
					mu.Lock()
					hist.Record(time.Duration(now - s))
					mu.Unlock()
					delivered.Add(1)
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	}
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		return load.Result{}, fmt.Errorf("push consumer: %w", err)
	}
	defer c.Shutdown()

	// Probes (a zero stamp) through every producer client until the
	// consumer has each queue: two rounds of the clients' round-robin queue
	// choice reach every queue, and every client has its route.
	probe := make([]byte, cfg.spec.SizeBytes)
	sent := int64(0)
	// The first sends also wait for the broker's first segment (a sync
	// flush prewrites it): a probe that fails is sent again, for 60 s.
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; round < 2*cfg.queues; {
		p := producers[round%len(producers)]
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := p.SendSync(sctx, primitive.NewMessage(topic, probe))
		cancel()
		if err != nil {
			if ctx.Err() != nil || time.Now().After(deadline) {
				return load.Result{}, fmt.Errorf("probe send: %w", err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		sent++
		round++
	}
	if err := waitUntil(ctx, 60*time.Second, func() bool { return probes.Load() >= sent }); err != nil {
		return load.Result{}, fmt.Errorf("the consumer received %d of %d probes: %w", probes.Load(), sent, err)
	}

	var produced atomic.Int64
	start := time.Now().Add(cfg.spec.Warmup)
	windowEnd.Store(start.Add(cfg.spec.Duration).UnixNano())
	windowStart.Store(start.UnixNano())
	// The broker is part of the system under test: its CPU over the
	// window counts beside this process's, read where the load reads its
	// own (Spec.Window brackets those readings).
	spec := cfg.spec
	var brokerUser, brokerSys time.Duration
	var brokerCPUErr error
	spec.Window = func() func() {
		u0, s0, err0 := hostctl.ProcessCPU(brokerPid)
		return func() {
			u1, s1, err1 := hostctl.ProcessCPU(brokerPid)
			brokerUser, brokerSys, brokerCPUErr = u1-u0, s1-s0, errors.Join(err0, err1)
		}
	}
	res := load.RunTimed(ctx, spec, nil, nil, func(worker int) load.TimedOp {
		p := producers[worker%len(producers)]
		body := load.Body(worker, cfg.spec.SizeBytes)
		return func(ctx context.Context, intended time.Time) error {
			stamp(body, intended)
			r, err := p.SendSync(ctx, primitive.NewMessage(topic, body))
			if err != nil {
				return err
			}
			if r.Status != primitive.SendOK {
				return fmt.Errorf("send status %v", r.Status)
			}
			produced.Add(1)
			return nil
		}
	})
	if err := waitUntil(ctx, 10*time.Second, func() bool { return consumed.Load() >= produced.Load() }); err != nil && res.Error == "" {
		res.Error = fmt.Sprintf("the consumer did not receive every message within 10 s of the producers' end (%d of %d)",
			consumed.Load(), produced.Load())
	}
	if brokerCPUErr != nil {
		// Half the system's CPU is no figure of it: none, and why.
		res.CPUUserNs, res.CPUSysNs = 0, 0
		options["cpu"] = "not measured: " + brokerCPUErr.Error()
	} else {
		res.CPUUserNs += brokerUser.Nanoseconds()
		res.CPUSysNs += brokerSys.Nanoseconds()
		options["cpu"] = "this process's (getrusage) and the broker's (/proc/<pid>/stat, 10 ms ticks) over the window"
	}
	mu.Lock()
	res.Delivery = hist
	mu.Unlock()
	res.Delivered = delivered.Load()
	return res, nil
}

func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// durability is the store's statement for the backend and flush mode, as
// the broker acknowledges sends.
func durability(cfg config) (*load.Ack, error) {
	for _, r := range engine.Backends() {
		if r.Name != cfg.backend {
			continue
		}
		d, err := r.Durability(mappedfile.Config{SegmentSizeBytes: cfg.segment, SyncFlush: cfg.flush == "sync"}, nil)
		if err != nil {
			return nil, fmt.Errorf("backend %s: durability: %w", cfg.backend, err)
		}
		return &load.Ack{Ack: "the broker answers SEND_MESSAGE once the store's put returned, and SendSync returns on that answer: " + d.Ack,
			ProcessCrash: "of the broker: " + d.ProcessCrash, PowerLoss: d.PowerLoss, Mechanism: d.Mechanism}, nil
	}
	return nil, fmt.Errorf("backend %q is not one mqstore links", cfg.backend)
}

func mqstorePath(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "mqstore")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("mqstore"); err == nil {
		return p, nil
	}
	return "", errors.New("no mqstore binary next to this program or on PATH: build one (go build -o DIR/mqstore ./cmd/mqstore) or pass --mqstore")
}

// brokerVersion is what `mqstore version` says.
func brokerVersion(bin string) string {
	b, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "mqstore (version unknown: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

// brokerProc is `mqstore serve` running as the broker.
type brokerProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}

	mu     sync.Mutex
	lines  []string // the last of its log
	err    error
	exited bool
}

func startBroker(ctx context.Context, bin string, cfg config, nsAddr string) (*brokerProc, error) {
	cmd := exec.Command(bin, "serve", "--dir", cfg.dir, "--role", "async-master", "--ha-listen", "127.0.0.1:0",
		"--flush", cfg.flush, "--backend", cfg.backend, "--segment-size", strconv.FormatInt(cfg.segment, 10), "--remoting-listen", "127.0.0.1:0", "--namesrv", nsAddr, "--status-interval", "0")
	setDeathSignal(cmd)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the broker (%s serve): %w", bin, err)
	}
	bp := &brokerProc{cmd: cmd, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "broker listening on "); ok {
				select {
				case listening <- a:
				default:
				}
			}
			bp.mu.Lock()
			bp.lines = append(bp.lines, line)
			if len(bp.lines) > 50 {
				bp.lines = bp.lines[1:]
			}
			bp.mu.Unlock()
		}
		err := cmd.Wait()
		bp.mu.Lock()
		bp.err, bp.exited = err, true
		bp.mu.Unlock()
		close(bp.done)
	}()
	select {
	case bp.addr = <-listening:
		return bp, nil
	case <-bp.done:
		return nil, bp.explain(errors.New("the broker exited before it listened"))
	case <-ctx.Done():
		bp.stop()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		bp.stop()
		return nil, bp.explain(errors.New("the broker did not listen within 60 s"))
	}
}

// explain adds the broker's last log lines to an error.
func (bp *brokerProc) explain(err error) error {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if len(bp.lines) == 0 {
		return err
	}
	return fmt.Errorf("%w; the broker's log ends: %s", err, strings.Join(bp.lines, " | "))
}

// stop ends the broker with SIGTERM (it closes its store cleanly), killing
// it after 30 s; an error when it did not exit cleanly.
func (bp *brokerProc) stop() error {
	bp.mu.Lock()
	exited := bp.exited
	bp.mu.Unlock()
	if !exited {
		_ = bp.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-bp.done:
		case <-time.After(30 * time.Second):
			_ = bp.cmd.Process.Kill()
			<-bp.done
			return bp.explain(errors.New("the broker did not stop within 30 s of SIGTERM"))
		}
	}
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if bp.err != nil {
		return fmt.Errorf("the broker: %w", bp.err)
	}
	return nil
}

// createTopic creates the topic on the broker (UPDATE_AND_CREATE_TOPIC),
// which registers it with the name server before it answers.
func createTopic(ctx context.Context, addr string, queues int, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := remoting.Dial(ctx, addr, nil, remoting.ConnOptions{Logger: log})
	if err != nil {
		return fmt.Errorf("create the topic: %w", err)
	}
	defer conn.Close()
	n := strconv.Itoa(queues)
	resp, err := conn.Invoke(ctx, remoting.NewRequest(remoting.UpdateAndCreateTopic,
		map[string]string{"topic": topic, "readQueueNums": n, "writeQueueNums": n, "perm": "6"}, nil))
	if err != nil {
		return fmt.Errorf("create the topic: %w", err)
	}
	if resp.Code != remoting.Success {
		return fmt.Errorf("create the topic: code %d: %s", resp.Code, resp.Remark)
	}
	return nil
}
