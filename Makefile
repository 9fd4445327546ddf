# agenthost: build, test, lint, bench.
GO       ?= go
BIN      ?= bin
STATICCHECK_VERSION ?= v0.8.2
# Packages with goroutines, run again under the race detector by `make test`.
RACE_PKGS ?= ./host/... ./plugins/... ./sdk/...

.PHONY: all build test test-unit test-race lint bench sim

# Seeds for `make sim` (the deterministic simulation of the runtime).
SEEDS ?= 20000

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

# The runtime's deterministic simulation with more seeds than `make test`
# runs (2,000). Replay one failing seed with:
#   go test ./host -run TestSimulation -sim.seed=N -v
sim:
	$(GO) test -count=1 -run '^TestSimulation$$' ./host -sim.seeds=$(SEEDS) -timeout 0
