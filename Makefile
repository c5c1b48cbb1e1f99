# mqstore — see README.md.
SHELL := /bin/bash
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
TEST_TIMEOUT ?= 14m

.PHONY: all build test lint vet staticcheck fmt-check tools clean bench bench-full bench-pressure bench-sweep

all: build

build:
	$(GO) build ./...

## test: everything CI runs — gofmt check, go vet, staticcheck, go test -race over every package,
## then the allocation checks without -race (the race detector allocates; those tests are built
## with `//go:build !race` and named *Allocs*).
test: fmt-check vet staticcheck
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -count=1 -run Allocs -timeout 5m ./...

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

$(STATICCHECK):
	@command -v $(GO) >/dev/null || { echo "Go is not installed: get Go 1.26 from your distribution or go.dev/dl"; exit 1; }
	@echo "installing staticcheck $(STATICCHECK_VERSION) into $(GOBIN)"
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

tools: $(STATICCHECK)

clean:
	$(GO) clean ./...

## bench: the quick comparison (about 4 minutes on 2 cores): every backend at 1 KiB, async and sync,
## throughput and latency, 3 repeats, without and with dirty-page pressure (root; skipped with the
## reason otherwise), with the copy ceiling, device probes (and fio when on PATH) and the NATS and
## pebble peers, in a temporary directory of the current file system. Prints the summary table;
## writes results/<YYYYMMDD-HHMMSS>-<host>/ and profiles/<run>/. BENCH_FLAGS adds or overrides flags.
BENCH_QUICK := --sizes 1024 --flush async,sync --workloads throughput,latency --pressure none,dirty --repeat 3 \
	--duration 1500ms --warmup 300ms --probe-bytes 512MiB --sync-probes 500 --profile-duration 500ms
BENCH_FLAGS ?=
bench:
	$(GO) run ./cmd/mqbench run --dir . $(BENCH_QUICK) $(BENCH_FLAGS)

## bench-full: the full default matrix (sizes 128, 1024, 4096; 5 s windows; about 25 minutes).
bench-full:
	$(GO) run ./cmd/mqbench run --dir . $(BENCH_FLAGS)

## bench-pressure: the pressure reference (root, about 15 minutes): every backend, 1 KiB, async and sync,
## throughput, latency, e2e, consume and recovery, without pressure and under dirty and swap pressure,
## on the current file system and on an emulated 7200 rpm HDD (loop device + blkio). Undoes every system
## change at exit; after a killed run, `go run ./cmd/mqbench cleanup`.
bench-pressure:
	$(GO) run ./cmd/mqbench run --dir . --emulate hdd --sizes 1024 --flush async,sync \
		--workloads throughput,latency,e2e,consume,recovery --pressure none,dirty,swap --repeat 2 --duration 1s \
		--warmup 200ms --peers "" --no-profile --probe-bytes 256MiB --sync-probes 200 --copy-bytes 128MiB \
		--consume-bytes 128MiB --recovery-bytes 256MiB --segment-size 64MiB $(BENCH_FLAGS)

## bench-sweep: the flush-policy grid (flush interval, least pages, commit interval, group-commit timeout)
## with its throughput / p99.9 Pareto front (about 3 minutes for two backends).
bench-sweep:
	$(GO) run ./cmd/mqbench sweep --dir . --backends mmap,uring --segment-size 64MiB --duration 1s --warmup 300ms $(BENCH_FLAGS)
