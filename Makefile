# mqstore — see README.md.
SHELL := /bin/bash
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
TEST_TIMEOUT ?= 14m
# The tests run with the store's assertions on (internal/invariants); a normal build compiles them out.
INVARIANTS := -tags mqstore_invariants

.PHONY: all build test cross test-interop test-peers lint vet staticcheck fmt-check tools clean bench bench-full bench-pressure bench-sweep bench-durable bench-replication bench-peers report

all: build

build:
	$(GO) build ./...

## test: everything CI runs — gofmt check, go vet and staticcheck (with and without the invariants tag),
## go test -race over every package with the invariants on,
## then the allocation checks without -race (the race detector allocates; those tests are built
## with `//go:build !race` and named *Allocs*), then the interop module (rocketmq-client-go against
## the name server and broker, loopback only; its examples test needs 127.0.0.1:9876 free), then
## the peers' module (pebble, NATS).
test: fmt-check vet staticcheck cross
	$(GO) test -race $(INVARIANTS) -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -count=1 -run Allocs -timeout 5m ./...
	$(MAKE) test-interop
	$(MAKE) test-peers

## cross: the builds beyond Linux — go vet of everything for macOS (the disk backends build there;
## Linux-only tests are tagged), and a Windows build of the engine and the backend seam (the mem backend
## runs there; the disk backends need mmap and fail at run time with ErrUnsupported).
cross:
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) build ./engine/... ./mappedfile/...

## test-peers: the peers' module alone (its own go.mod: pebble's and NATS's dependencies stay out of ours).
test-peers:
	cd bench/peers && $(GO) vet ./... && $(GO) test -race -timeout 10m ./...

## test-interop: the interop module alone (its own go.mod: the client's dependencies stay out of ours).
test-interop:
	cd interop && $(GO) vet ./... && $(GO) test -race -timeout 10m ./...

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet $(INVARIANTS) ./...

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...
	$(STATICCHECK) $(INVARIANTS) ./...

$(STATICCHECK):
	@command -v $(GO) >/dev/null || { echo "Go is not installed: get Go 1.26 from your distribution or go.dev/dl"; exit 1; }
	@echo "installing staticcheck $(STATICCHECK_VERSION) into $(GOBIN)"
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

tools: $(STATICCHECK)

clean:
	$(GO) clean ./...

## bench: the quick comparison (≤ 8 minutes on 2 cores; the estimate is printed at the start): every backend at 1 KiB,
## async and sync, the closed loop at 16 producers and the open loop at one rate shared by every backend and the
## pebble-wal peer, 5 measured repeats after a warm one, interleaved and shuffled, the A/A twin, the harness's floor,
## each system's sustainable rate, the device limits, and the open loop again under dirty-page pressure (root;
## skipped with the reason otherwise). 1 s windows: shorter than the automatic window on most machines (see README).
## Writes results/<YYYYMMDD-HHMMSS>-<host>/ and profiles/<run>/. BENCH_FLAGS adds or overrides flags.
## BENCH_SWEEP: the committed flush-policy sweep whose Pareto fronts make bench's first screen quotes.
BENCH_SWEEP ?= results/20261202-212928-vm
BENCH_QUICK := --message rocketmq --sizes 1024 --flush async,sync --workloads throughput,latency --pressure none,dirty --pressure-workloads latency \
	--producers 16 --rates 1000 --repeat 5 --duration 1s --warmup 200ms --peers pebble-wal --search-probes 3 --search-duration 500ms \
	--segment-size 64MiB --probe-bytes 256MiB --sync-probes 300 --profile-duration 1s \
	$(if $(BENCH_SWEEP),--sweep-from $(BENCH_SWEEP))
BENCH_FLAGS ?=
bench:
	$(GO) run ./cmd/mqbench run --dir . $(BENCH_QUICK) $(BENCH_FLAGS)

## bench-full: the full default matrix (sizes 128, 1024, 4096; producers 1,4,16,64,256; the rate ladder
## 1k…200k; 5 measured repeats; the automatic window; every peer). Hours on 2 cores: narrow it with BENCH_FLAGS.
bench-full:
	$(GO) run ./cmd/mqbench run --dir . $(BENCH_FLAGS)

## bench-pressure: the pressure reference (root): every backend, 1 KiB, async and sync, throughput, latency, e2e,
## consume and recovery, without pressure and under dirty and swap pressure, on the current file system and on an
## emulated 7200 rpm HDD (a FUSE latency model under a loop device, calibrated with fio at the start). Undoes
## every system change at exit; after a killed run, `go run ./cmd/mqbench cleanup`.
bench-pressure:
	$(GO) run ./cmd/mqbench run --dir . --emulate hdd --sizes 1024 --flush async,sync \
		--workloads throughput,latency,e2e,consume,recovery --pressure none,dirty,swap --producers 16 --rates 1000 \
		--repeat 5 --duration 1s --warmup 200ms --peers "" --no-profile --search-probes 3 --search-duration 500ms \
		--probe-bytes 256MiB --sync-probes 200 \
		--consume-bytes 128MiB --recovery-bytes 256MiB --segment-size 64MiB $(BENCH_FLAGS)

## bench-sweep: the flush-policy grid (flush interval, least pages, commit interval where a backend commits,
## group-commit timeout) on every backend with make bench's message, 3 measured repeats per point, with its
## durable-throughput / p99.9 Pareto front (the estimate is printed at the start). make bench quotes the committed one (BENCH_SWEEP).
bench-sweep:
	$(GO) run ./cmd/mqbench sweep --dir . --message rocketmq --segment-size 64MiB --duration 1s --warmup 300ms $(BENCH_FLAGS)

## bench-durable: the durable-path table — sync flush at 1, 4, 16, 64 and 256 producers, every backend and the pebble-wal peer,
## 1 KiB, 5 measured repeats of 1 s, the device limits (the 4 KiB write+fdatasync on a fallocated and on a pre-written
## file, segment creation), and each backend's CPU by stage from a 3 s profiled run at 256 producers. About 7 minutes on
## 2 cores (the estimate is printed at the start). Async end to end beside it:
## BENCH_FLAGS='--flush async,sync --workloads throughput,e2e --rates 1000'.
bench-durable:
	$(GO) run ./cmd/mqbench run --dir . --sizes 1024 --flush sync --workloads throughput --producers 1,4,16,64,256 --peers pebble-wal \
		--repeat 5 --duration 1s --warmup 200ms --profile-producers 256 --profile-duration 3s --segment-size 64MiB --probe-bytes 256MiB \
		--sync-probes 300 $(BENCH_FLAGS)

## bench-replication: the replication comparison — mmap and uring-direct, 1 KiB, async and sync flush, each without a slave, with an
## ASYNC_MASTER slave and with a SYNC_MASTER slave (its own process and directory), closed loop at 16 and 64 producers and the
## open loop at 1000 msgs/s: throughput, latency, replication lag and the slave's durable rate, and summary.md's
## ASYNC_FLUSH + SYNC_MASTER vs SYNC_FLUSH table. About 10 minutes on 2 cores. BENCH_FLAGS='--ha-delay 1ms' puts an
## EMULATED 1 ms one-way network between them (a TCP proxy: labelled EMULATED everywhere); '--slave-dir DIR' another device.
bench-replication:
	$(GO) run ./cmd/mqbench run --dir . --backends mmap,uring-direct --sizes 1024 --flush async,sync --replication none,async,sync \
		--producers 16,64 --rates 1000 --workloads throughput,latency --peers "" --repeat 5 --duration 1s --warmup 200ms \
		--search-probes 0 --no-profile --no-limits --segment-size 64MiB $(BENCH_FLAGS)

## bench-peers: the comparison with the peers as their maintainers would run them (pebble-wal, pebble v2 tuned, NATS over
## loopback TCP): mmap and uring-direct, async and sync, 1, 16 and 64 producers, 3 measured repeats, every body size;
## summary.md gives each system ÷ pebble-wal and the durability table. The automatic window makes it long
## (an hour or more on 2 cores): BENCH_FLAGS='--duration 1s --sizes 1024' runs it in about 5 minutes.
bench-peers:
	$(GO) run ./cmd/mqbench run --dir . --backends mmap,uring-direct --peers pebble-wal,pebble,nats --flush async,sync \
		--producers 1,16,64 --workloads throughput --repeat 3 $(BENCH_FLAGS)

## report: re-render a run's summary.md, plots, bench.txt and .hgrm files from its run.json.gz (results/ keeps
## only summary.md, bench.txt and run.json.gz): make report RUN=results/<id>
report:
	@test -n "$(RUN)" || { echo "usage: make report RUN=results/<id>"; exit 2; }
	$(GO) run ./cmd/mqbench report $(RUN)
