# mqstore — see README.md.
SHELL := /bin/bash
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK := $(GOBIN)/staticcheck
TEST_TIMEOUT ?= 14m

.PHONY: all build test lint vet staticcheck fmt-check tools clean

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
