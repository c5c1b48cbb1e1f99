package interop

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDir holds the programs the tests build (TestMain removes it).
var binDir string

var builds sync.Map // import path → *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// build builds a main package of the module (or of the client) without the
// race detector, once per test binary.
func build(t *testing.T, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(binDir, strings.ReplaceAll(pkg, "/", "_"))
		b.out, b.err = exec.Command(goBin, "build", "-o", b.path, pkg).CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}

// consumerProc is internal/pushconsumer running as a process: one push
// consumer, stopped by SIGTERM (the client's Shutdown happens there).
type consumerProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	got     *received
	started chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	lines   []string
}

func startConsumerProc(t *testing.T, c *cluster, group, topic, tags string, extra ...string) *consumerProc {
	t.Helper()
	bin := build(t, "github.com/mqstore/mqstore/interop/internal/pushconsumer")
	cmd := exec.Command(bin, append([]string{"-namesrv", c.ns.Addr(), "-group", group, "-topic", topic, "-tags", tags, "-instance", instance(t)}, extra...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	p := &consumerProc{t: t, cmd: cmd, got: newReceived(), started: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			if line == "STARTED" {
				close(p.started)
			}
			if f := strings.SplitN(line, " ", 6); len(f) == 6 && f[0] == "MSG" {
				p.got.add(f[1], f[5])
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case <-p.started:
	case <-p.done:
		t.Fatalf("the consumer process ended before starting:\n%s", p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("the consumer process did not start in 60 s:\n%s", p.output())
	}
	return p
}

func (p *consumerProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// stop shuts the consumer down (SIGTERM) and waits for the process.
func (p *consumerProc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("the consumer process did not stop in 30 s:\n%s", p.output())
	}
	if !strings.Contains(p.output(), "SHUTDOWN") {
		p.t.Fatalf("the consumer process did not shut down cleanly:\n%s", p.output())
	}
}

// runWithBinDir runs the tests with binDir made and removed.
func runWithBinDir(m interface{ Run() int }) int {
	dir, err := os.MkdirTemp("", "mqstore-interop-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	return code
}
