package peers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/peers/internal/gomod"
	"github.com/mqstore/mqstore/engine"
	"github.com/nats-io/nats-server/v2/server"
)

// Compile-time checks: every peer has the harness's durability methods.
var (
	_ Durability = (*pebbleWALPeer)(nil)
	_ Durability = (*pebblePeer)(nil)
	_ Durability = (*natsPeer)(nil)
	_ Peer       = (*pebbleWALPeer)(nil)
	_ Peer       = (*pebblePeer)(nil)
	_ Peer       = (*natsPeer)(nil)
)

const testMessageBytes = 1024

type peerCase struct{ name, flush string }

func allCases() []peerCase {
	var cases []peerCase
	for _, name := range Names() {
		for _, flush := range []string{FlushSync, FlushAsync} {
			cases = append(cases, peerCase{name, flush})
		}
	}
	return cases
}

func (c peerCase) String() string { return c.name + "/" + c.flush }

func openPeer(t *testing.T, c peerCase, workers int) (Peer, string) {
	t.Helper()
	dir := t.TempDir()
	p, err := Open(context.Background(), c.name, dir, c.flush, WithOutstanding(workers))
	if err != nil {
		t.Fatalf("open %s: %v", c, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, dir
}

// appendConcurrently runs workers × perWorker ops while a sampler checks
// that Positions never goes backwards and never reports durable > written.
func appendConcurrently(t *testing.T, p Peer, workers, perWorker int) {
	t.Helper()
	ops := make([]load.Op, workers)
	for w := range ops {
		ops[w] = p.NewOp(w, testMessageBytes)
	}
	stop := make(chan struct{})
	samplerErr := make(chan error, 1)
	go func() {
		var lastWritten, lastDurable int64
		for {
			written, durable := p.Positions()
			switch {
			case durable > written:
				samplerErr <- fmt.Errorf("Positions: durable %d > written %d", durable, written)
				return
			case written < lastWritten || durable < lastDurable:
				samplerErr <- fmt.Errorf("Positions went back: (%d, %d) after (%d, %d)", written, durable, lastWritten, lastDurable)
				return
			}
			lastWritten, lastDurable = written, durable
			select {
			case <-stop:
				samplerErr <- nil
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for w := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				if err := ops[w](context.Background()); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-samplerErr; err != nil {
		t.Fatal(err)
	}
	if e := failed.Load(); e != nil {
		t.Fatalf("op: %v", *e)
	}
}

// TestPeersAppendDrain: every peer in both flush modes opens, takes
// concurrent appends with consistent Positions, counts what it wrote, and
// after Drain reports durable == written. Sync peers report every
// acknowledged byte durable before Drain.
func TestPeersAppendDrain(t *testing.T) {
	const workers, perWorker = 8, 40
	for _, c := range allCases() {
		t.Run(c.String(), func(t *testing.T) {
			p, _ := openPeer(t, c, workers)
			appendConcurrently(t, p, workers, perWorker)
			written, durable := p.Positions()
			if min := int64(workers * perWorker * testMessageBytes); written < min {
				t.Fatalf("written %d bytes, want at least the %d payload bytes of %d messages", written, min, workers*perWorker)
			}
			if c.flush == FlushSync && durable != written {
				t.Fatalf("sync: durable %d != written %d once every op returned", durable, written)
			}
			if err := p.Drain(context.Background()); err != nil {
				t.Fatalf("drain: %v", err)
			}
			written2, durable2 := p.Positions()
			if durable2 != written2 || written2 < written {
				t.Fatalf("after Drain: written %d, durable %d (before: %d, %d)", written2, durable2, written, durable)
			}
			if err := p.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
		})
	}
}

// TestNATSRecordBytes: the bytes NATS peers count are the bytes the stream
// stores (its own State.Bytes), so a change of NATS's record layout fails
// here rather than skewing durable throughput.
func TestNATSRecordBytes(t *testing.T) {
	for _, c := range []peerCase{{NATS, FlushSync}, {NATSInProc, FlushAsync}} {
		t.Run(c.String(), func(t *testing.T) {
			p, _ := openPeer(t, c, 4)
			appendConcurrently(t, p, 4, 25)
			written, _ := p.Positions()
			info, err := p.(*natsPeer).js.Stream(context.Background(), natsStream)
			if err != nil {
				t.Fatal(err)
			}
			if st := info.CachedInfo().State; int64(st.Bytes) != written || st.Msgs != 100 {
				t.Fatalf("stream holds %d messages, %d bytes; the peer counted %d bytes written", st.Msgs, st.Bytes, written)
			}
		})
	}
}

// TestPebbleFlushCountsDurable: with NoSync, a completed memtable flush
// makes every write it covers durable (FlushEnd's largest sequence number),
// and nothing is durable before.
func TestPebbleFlushCountsDurable(t *testing.T) {
	p, _ := openPeer(t, peerCase{Pebble, FlushAsync}, 4)
	appendConcurrently(t, p, 4, 50)
	written, durable := p.Positions()
	if durable != 0 {
		t.Fatalf("NoSync, no flush yet: durable %d, want 0", durable)
	}
	if err := p.(*pebblePeer).db.Flush(); err != nil {
		t.Fatal(err)
	}
	if written2, durable2 := p.Positions(); durable2 != written || written2 != written {
		t.Fatalf("after a flush: written %d, durable %d; want both %d", written2, durable2, written)
	}
}

func TestUnknownPeerAndFlush(t *testing.T) {
	cases := []struct {
		name, flush string
		want        error
	}{
		{"pebbles", FlushSync, ErrUnknownPeer},
		{"", FlushSync, ErrUnknownPeer},
		{"NATS", FlushAsync, ErrUnknownPeer},
		{Pebble, "fsync", ErrBadFlush},
		{NATS, "", ErrBadFlush},
	}
	for _, c := range cases {
		_, err := Open(context.Background(), c.name, t.TempDir(), c.flush)
		if !errors.Is(err, c.want) {
			t.Fatalf("Open(%q, %q): %v, want %v", c.name, c.flush, err, c.want)
		}
		if c.want == ErrUnknownPeer && !strings.Contains(err.Error(), strings.Join(Names(), ", ")) {
			t.Fatalf("Open(%q): %q does not name the valid peers", c.name, err)
		}
	}
	if _, err := Open(context.Background(), NATS, t.TempDir(), FlushSync, WithOutstanding(0)); err == nil {
		t.Fatal("0 outstanding requests accepted")
	}
	if _, err := Open(context.Background(), NATS, t.TempDir(), FlushAsync, WithSyncInterval(-time.Second)); err == nil {
		t.Fatal("a negative sync interval accepted")
	}
}

// TestNATSWindowTooSmall: more producers than the pending window is a clear
// error, not a stall.
func TestNATSWindowTooSmall(t *testing.T) {
	p, _ := openPeer(t, peerCase{NATS, FlushAsync}, 2)
	for w := range 2 {
		if err := p.NewOp(w, 16)(context.Background()); err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	if err := p.NewOp(2, 16)(context.Background()); err == nil || !strings.Contains(err.Error(), "pending window of 2") {
		t.Fatalf("a third producer with a window of 2: %v", err)
	}
}

// TestDefaultSyncIntervalIsMQStores: the async peers are matched to
// mqstore's flush interval.
func TestDefaultSyncIntervalIsMQStores(t *testing.T) {
	if DefaultSyncInterval != engine.DefaultFlushInterval {
		t.Fatalf("peers.DefaultSyncInterval %v, engine.DefaultFlushInterval %v", DefaultSyncInterval, engine.DefaultFlushInterval)
	}
	info, _ := Describe(NATS, FlushAsync)
	if !strings.Contains(info.Options["syncInterval"], engine.DefaultFlushInterval.String()) {
		t.Fatalf("nats async syncInterval %q", info.Options["syncInterval"])
	}
}

// requiredVersions reads the versions the peers module's go.mod requires.
func requiredVersions(t *testing.T) map[string]string {
	t.Helper()
	versions, err := gomod.Required("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

// TestLabelsAndVersions: every peer's version is the one go.mod requires,
// read from the build info (never written in the code), and appears in its
// label; every peer says its options and durability. A test binary carries
// no dependency versions: then the label must say the version is unknown
// and Describe must say why (cmd/mqpeer's test checks a real build).
func TestLabelsAndVersions(t *testing.T) {
	req := requiredVersions(t)
	_, depsErr := buildInfoVersion(pebbleModule)
	module := map[string]string{PebbleWAL: pebbleModule, Pebble: pebbleModule, NATS: natsServerModule, NATSInProc: natsServerModule}
	labels := map[string]bool{}
	for _, c := range allCases() {
		info, err := Describe(c.name, c.flush)
		want := req[module[c.name]]
		if depsErr == nil {
			if err != nil || want == "" || info.Version != want {
				t.Fatalf("%s: version %q (%v), go.mod requires %s %q", c, info.Version, err, module[c.name], want)
			}
		} else if !errors.Is(err, ErrNoBuildInfo) || info.Version != unknownVersion {
			t.Fatalf("%s without build info: version %q, error %v", c, info.Version, err)
		}
		if !strings.Contains(info.Label, info.Version) {
			t.Fatalf("%s: label %q does not carry version %s", c, info.Label, info.Version)
		}
		d := info.Durability
		if len(info.Options) == 0 || d.Ack == "" || d.ProcessCrash == "" || d.PowerLoss == "" || d.Mechanism == "" {
			t.Fatalf("%s: options or durability missing: %+v", c, info)
		}
		if labels[info.Label] {
			t.Fatalf("two peers share the label %q", info.Label)
		}
		labels[info.Label] = true
	}
	if v, err := moduleVersion(natsServerModule); err == nil && v != "v"+server.VERSION {
		t.Fatalf("build info says nats-server %s, the server says %s", v, server.VERSION)
	}
	if _, err := moduleVersion("example.com/not/linked"); !errors.Is(err, ErrNoBuildInfo) {
		t.Fatalf("a module not linked in: %v, want ErrNoBuildInfo", err)
	}
}

// TestDrainHonoursContext: a cancelled Drain of an async peer with
// unsynced bytes returns the context's error.
func TestDrainHonoursContext(t *testing.T) {
	for _, name := range []string{PebbleWAL, Pebble, NATS} {
		t.Run(name, func(t *testing.T) {
			p, _ := openPeer(t, peerCase{name, FlushAsync}, 1)
			appendConcurrently(t, p, 1, 5)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := p.Drain(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Drain with a cancelled context: %v", err)
			}
		})
	}
}
