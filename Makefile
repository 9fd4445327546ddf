# agenthost: build, test, lint, bench.
GO       ?= go
BIN      ?= bin
STATICCHECK_VERSION ?= v0.8.2
# Packages with goroutines, run again under the race detector by `make test`.
RACE_PKGS ?= ./host/... ./plugins/... ./sdk/...

.PHONY: all build test test-unit test-race lint bench tools

all: build

build:
	$(GO) build ./...

test: test-unit test-race

test-unit:
	$(GO) test -count=1 ./...

test-race:
	$(GO) test -count=1 -race $(RACE_PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
