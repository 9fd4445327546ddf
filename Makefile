# agenthost: build, test, lint, bench.
GO       ?= go
BIN      ?= bin
STATICCHECK_VERSION ?= v0.8.2
# Packages with goroutines, run again under the race detector by `make test`.
RACE_PKGS ?= ./host/... ./plugins/... ./sdk/...

.PHONY: all build test test-unit test-race lint bench tools guests guests-c

all: build

build: guests
	$(GO) build ./...

# Standard wasm guests, built into $(BIN)/guests/<name>.wasm. The C guest is
# committed built (guests-c rebuilds it from source).
GO_GUESTS ?= queue interrupt reject inject refine step-budget system-instruction

guests:
	@mkdir -p $(BIN)/guests
	@for g in $(GO_GUESTS); do \
	  echo "guest $$g"; \
	  GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared \
	    -o $(BIN)/guests/$$g.wasm ./guests/policy/$$g || exit 1; \
	done
	cp guests/policy/refine-c/refine.wasm $(BIN)/guests/refine-c.wasm

# Rebuilds the committed C guest from its source (Debian packages clang, lld).
guests-c:
	guests/policy/refine-c/build.sh

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
