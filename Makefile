# mqstore — see README.md.
SHELL := /bin/bash
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
TEST_TIMEOUT ?= 14m

.PHONY: all build test lint vet staticcheck fmt-check tools clean bench bench-full

all: build

build:
	$(GO) build ./...

## test: everything CI runs — gofmt check, go vet, staticcheck, go test -race over every package.
test: fmt-check vet staticcheck
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

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

## bench: the quick comparison (about 3 minutes on 2 cores): every backend at 1 KiB, async and sync,
## throughput and latency, 3 repeats, with the copy ceiling, device probes (and fio when on PATH) and
## the NATS and pebble peers, in a temporary directory of the current file system. Prints the summary
## table; writes results/<YYYYMMDD-HHMMSS>-<host>/ and profiles/<run>/. BENCH_FLAGS adds or overrides flags.
BENCH_QUICK := --sizes 1024 --flush async,sync --workloads throughput,latency --repeat 3 \
	--duration 1500ms --warmup 300ms --probe-bytes 512MiB --sync-probes 500 --profile-duration 500ms
BENCH_FLAGS ?=
bench:
	$(GO) run ./cmd/mqbench run --dir . $(BENCH_QUICK) $(BENCH_FLAGS)

## bench-full: the full default matrix (sizes 128, 1024, 4096; 5 s windows; about 25 minutes).
bench-full:
	$(GO) run ./cmd/mqbench run --dir . $(BENCH_FLAGS)
