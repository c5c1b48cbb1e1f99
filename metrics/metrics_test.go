package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestScrape(t *testing.T) {
	store, err := engine.Open(context.Background(), t.TempDir(), engine.Options{Backend: "mem", SegmentSizeBytes: 1 << 20,
		ConsumeQueueFileSizeBytes: 20 * 1024, IndexSlotCount: 64, IndexMaxEntries: 256,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for range 3 {
		if _, err := store.Put(context.Background(), &engine.Message{Topic: "m", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// An illegal message counts as a failure of another status.
	store.Put(context.Background(), &engine.Message{Topic: "bad topic", Body: []byte("x")})

	c := NewCollector(store, func() map[string]int64 { return map[string]int64{"127.0.0.1:40000": 42} })
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	rm, err := NewRemoting(reg)
	if err != nil {
		t.Fatal(err)
	}
	rm.Observe(10, 0, time.Millisecond)
	rm.Observe(11, 19, 2*time.Second)
	srv, err := Listen(":0", reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") {
		t.Fatalf("a bare port should bind loopback, bound %s", srv.Addr())
	}
	if err := store.WaitDispatched(context.Background(), store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, srv.Addr())
	for _, want := range []string{
		`mqstore_puts_total{status="PUT_OK"} 3`,
		`mqstore_puts_total{status="OTHER"} 1`,
		`mqstore_put_duration_seconds_count 3`,
		`mqstore_put_duration_seconds_bucket{le="+Inf"} 3`,
		`mqstore_store_info{backend="mem",flush_mode="async",role="ASYNC_MASTER"} 1`,
		`mqstore_ha_lag_bytes{slave="127.0.0.1:40000"} 42`,
		`mqstore_consumequeues 1`,
		`mqstore_consumequeue_messages 3`,
		`mqstore_consumequeue_file_bytes 20480`,
		`mqstore_append_lock_held_seconds 0`,
		`mqstore_remoting_requests_total{code="11",response="19"} 1`,
		`mqstore_remoting_request_duration_seconds_count{code="10"} 1`,
		`mqstore_flush_duration_seconds_bucket`,
		`mqstore_dispatch_behind_bytes`,
		`mqstore_commitlog_offset_bytes{position="write"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}

	// The figures move: another queue and messages; a verified slave the
	// HA master reports (its lag from the store's own report, before the
	// connection list's 42 for the same address).
	for i := range 2 {
		if _, err := store.Put(context.Background(), &engine.Message{Topic: "m2", QueueID: int32(i), Body: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.WaitDispatched(context.Background(), store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	end := store.CommitLogReader().End()
	store.ReportSlaves([]engine.SlaveReport{{Addr: "127.0.0.1:40000", Verified: true, AckedOffset: end - 10, Position: end - 10}})
	body = scrape(t, srv.Addr())
	for _, want := range []string{
		`mqstore_consumequeues 3`,
		`mqstore_consumequeue_messages 5`,
		`mqstore_consumequeue_file_bytes 61440`,
		`mqstore_ha_lag_bytes{slave="127.0.0.1:40000"} 10` + "\n",
		fmt.Sprintf(`mqstore_ha_slave_acked_offset_bytes{slave="127.0.0.1:40000"} %d`, end-10),
		`mqstore_ha_slave_in_sync{slave="127.0.0.1:40000"} 1`, // 10 bytes behind: within the default lag
	} {
		if !strings.Contains(body, want) {
			t.Errorf("second scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
