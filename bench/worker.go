package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
	"golang.org/x/sys/unix"
)

// WorkerEnv, when set in the environment, makes MaybeWorker run this
// executable as an mqbench worker: a child process that the harness can put
// in cgroups (the store side of swap-pressure cells and mqstore's floors
// beside them, the neighbours, the producer a recovery cell kills).
const WorkerEnv = "MQBENCH_WORKER"

// Worker kinds.
const (
	workerRepeat       = "repeat"        // one store repeat (throughput, latency or e2e); replies a Repeat
	workerFloor        = "floor"         // one floor repeat: the open loop's schedule against a no-op; replies a Repeat
	workerDirty        = "dirty"         // writes buffered data to a file forever
	workerAnon         = "anon"          // touches anonymous memory forever
	workerProduceCrash = "produce-crash" // fills a store, says "ready", waits to be killed
	// workerSlave ("slave", replication.go) replicates a master until its stdin ends.
)

type workerRequest struct {
	Kind     string      `json:"kind"`
	Store    StoreConfig `json:"store"`
	Backend  string      `json:"backend,omitempty"`
	Flush    string      `json:"flush,omitempty"`
	Spec     load.Spec   `json:"spec"`
	Dir      string      `json:"dir,omitempty"`
	Bytes    int64       `json:"bytes,omitempty"`
	Workload string      `json:"workload,omitempty"`
	// Master is a slave's master (its HA address).
	Master string `json:"master,omitempty"`
}

type workerReply struct {
	Repeat  runfile.Repeat    `json:"repeat"`
	Options map[string]string `json:"options,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// MaybeWorker runs the worker and exits when WorkerEnv is set; otherwise it
// returns at once. Call it first thing in main (and in TestMain).
func MaybeWorker() {
	host.HDDDaemon() // the emulated disk's FUSE daemon runs and exits here
	if os.Getenv(WorkerEnv) == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runWorker(ctx, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mqbench worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	var req workerRequest
	dec := json.NewDecoder(in)
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	switch req.Kind {
	case workerSlave:
		return slaveWorker(ctx, req, dec, out)
	case workerRepeat:
		var rep runfile.Repeat
		var options map[string]string
		if req.Workload == WorkloadE2E {
			rep, options = e2eRepeat(ctx, req.Store, req.Dir, req.Backend, req.Flush, req.Spec)
		} else {
			rep, options = storeRepeat(ctx, req.Store, req.Dir, req.Backend, req.Flush, req.Spec, nil)
		}
		return json.NewEncoder(out).Encode(workerReply{Repeat: rep, Options: options})
	case workerFloor:
		return json.NewEncoder(out).Encode(workerReply{Repeat: floorRepeat(ctx, req.Spec)})
	case workerDirty:
		return dirtyNeighbour(ctx, req.Dir, req.Bytes)
	case workerAnon:
		return anonNeighbour(ctx, req.Bytes)
	case workerProduceCrash:
		if err := fillStore(ctx, req.Store, req.Dir, req.Backend, req.Spec.SizeBytes, req.Bytes, nil); err != nil {
			return err
		}
		fmt.Fprintln(out, "ready")
		<-ctx.Done() // killed with SIGKILL before this
		return nil
	}
	return fmt.Errorf("unknown worker kind %q", req.Kind)
}

// dirtyNeighbour overwrites a file of fileBytes in dir with buffered 1 MiB
// writes, round and round, so page-cache dirt never runs out.
func dirtyNeighbour(ctx context.Context, dir string, fileBytes int64) error {
	f, err := os.CreateTemp(dir, "mqbench-dirty-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := load.Body(7, 1<<20)
	var off int64
	for ctx.Err() == nil {
		if _, err := f.WriteAt(buf, off); err != nil {
			return fmt.Errorf("dirty neighbour: %w", err)
		}
		if off += int64(len(buf)); off >= fileBytes {
			off = 0
		}
	}
	return nil
}

// anonNeighbour maps sizeBytes of anonymous memory and writes one byte of
// every page, round and round.
func anonNeighbour(ctx context.Context, sizeBytes int64) error {
	mem, err := unix.Mmap(-1, 0, int(sizeBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("anon neighbour: %w", err)
	}
	defer unix.Munmap(mem)
	for round := byte(1); ctx.Err() == nil; round++ {
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = round
		}
	}
	return nil
}

// worker is a started worker process.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr bytes.Buffer
}

// startWorker starts this executable as a worker, puts it into the cgroups
// (before it reads its request, so all its work happens inside them) and
// sends req.
func startWorker(ctx context.Context, req workerRequest, cgroups []string) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w := &worker{cmd: exec.CommandContext(ctx, self)}
	w.cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	w.cmd.Cancel = func() error { return w.cmd.Process.Signal(os.Interrupt) }
	w.cmd.WaitDelay = 10 * time.Second
	// The worker dies with mqbench, whatever kills it (on Linux).
	w.cmd.SysProcAttr = dieWithParent()
	w.cmd.Stderr = &w.stderr
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if w.stdout, err = w.cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	for _, cg := range cgroups {
		if err := hostctl.JoinCgroup(cg, w.cmd.Process.Pid); err != nil {
			w.kill()
			return nil, err
		}
	}
	if err := json.NewEncoder(w.stdin).Encode(req); err != nil {
		w.kill()
		return nil, fmt.Errorf("worker request: %w", err)
	}
	return w, nil
}

func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

func (w *worker) waitLine() (string, error) {
	line, err := bufio.NewReader(w.stdout).ReadString('\n')
	if err != nil {
		_ = w.cmd.Wait()
		return "", fmt.Errorf("worker: %w: %s", err, strings.TrimSpace(w.stderr.String()))
	}
	return strings.TrimSpace(line), nil
}

// workerStoreRepeat runs one store repeat in a worker placed in cgroups.
func workerStoreRepeat(ctx context.Context, store StoreConfig, dir, backend, flush, workload string, spec load.Spec, cgroups []string) (runfile.Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	return workerRun(ctx, workerRequest{Kind: workerRepeat, Store: store, Backend: backend, Flush: flush, Spec: spec, Dir: dir, Workload: workload}, cgroups)
}

// workerFloorRepeat runs one floor repeat — spec's schedule against a
// no-op — in a worker placed in cgroups: the process that drives
// mqstore's cells when they run in workers (runner.isolate).
func workerFloorRepeat(ctx context.Context, spec load.Spec, cgroups []string) runfile.Repeat {
	rep, _ := workerRun(ctx, workerRequest{Kind: workerFloor, Spec: spec}, cgroups)
	return rep
}

// workerRun starts a worker in cgroups with req and returns the Repeat
// (and options) it replies.
func workerRun(ctx context.Context, req workerRequest, cgroups []string) (runfile.Repeat, map[string]string) {
	w, err := startWorker(ctx, req, cgroups)
	if err != nil {
		return failedRepeat(err), nil
	}
	w.stdin.Close()
	out, _ := io.ReadAll(w.stdout)
	runErr := w.cmd.Wait()
	var reply workerReply
	if err := json.Unmarshal(out, &reply); err != nil {
		if ctx.Err() != nil {
			return runfile.Repeat{Status: runfile.StatusInterrupted, Reason: "interrupted"}, nil
		}
		return failedRepeat(fmt.Errorf("worker: %v (%v): %s%s", runErr, err, strings.TrimSpace(w.stderr.String()), oomNote(cgroups))), nil
	}
	return reply.Repeat, reply.Options
}

// oomNote says when a memory cgroup among cgroups (v1 or v2) has
// OOM-killed a process.
func oomNote(cgroups []string) string {
	for _, dir := range cgroups {
		for _, v := range []int{1, 2} {
			kills, limit, err := hostctl.Cgroup{Dir: dir, Version: v}.OOMKills()
			if err != nil || kills == 0 {
				continue
			}
			return fmt.Sprintf(" — the memory cgroup's OOM killer has killed %d process(es) (limit %s bytes): the store's unswappable memory (locked or pinned buffers) does not fit; raise --swap-limit", kills, limit)
		}
	}
	return ""
}

// neighbour is a running neighbour worker.
type neighbour struct {
	w       *worker
	what    string
	req     workerRequest // to start it again
	cgroups []string
}

func startNeighbour(ctx context.Context, j *hostctl.Journal, req workerRequest, what string, cgroups []string) (*neighbour, error) {
	w, err := startWorker(context.WithoutCancel(ctx), req, cgroups)
	if err != nil {
		return nil, err
	}
	if err := j.RecordProcess(w.cmd.Process.Pid, what); err != nil {
		w.kill()
		return nil, err
	}
	return &neighbour{w: w, what: what, req: req, cgroups: cgroups}, nil
}
