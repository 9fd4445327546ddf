# agenthost: build, test, lint, bench.
GO       ?= go
BIN      ?= bin
STATICCHECK_VERSION ?= v0.8.2
# Packages with goroutines, run again under the race detector by `make test`.
RACE_PKGS ?= ./host/... ./plugins/... ./sdk/... ./cmd/...

.PHONY: all build proto guests guests-c test test-unit test-race test-soak lint bench bench-hosts sim soak soak-nemeses mutants

# Seeds for `make sim` (the deterministic simulation of the runtime).
SEEDS ?= 20000

all: build

PROTOC   ?= protoc
PROTO_INCLUDE ?= /usr/include

build: guests
	$(GO) build ./...
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/agenthost ./cmd/agenthost
	$(GO) build -o $(BIN)/agenthost-loadgen ./cmd/agenthost-loadgen

# Regenerate the store protocol's Go code. Needs protoc, protoc-gen-go and
# protoc-gen-go-grpc on PATH (see abi/storepb/doc.go).
proto:
	cd abi/storepb && PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(PROTOC) -I . -I $(PROTO_INCLUDE) \
	  --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative store.proto

# Standard wasm guests, built into $(BIN)/guests/<name>.wasm, and the example
# guests in five languages (guests/examples), into
# $(BIN)/guests/example-<language>.wasm. The C guest is committed built
# (guests-c rebuilds it from source).
GO_GUESTS ?= queue interrupt reject inject refine step-budget system-instruction tool-approval

guests:
	@mkdir -p $(BIN)/guests
	@for g in $(GO_GUESTS); do \
	  echo "guest $$g"; \
	  GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared \
	    -o $(BIN)/guests/$$g.wasm ./guests/policy/$$g || exit 1; \
	done
	cp guests/policy/refine-c/refine.wasm $(BIN)/guests/refine-c.wasm
	GO=$(GO) guests/examples/build.sh $(BIN)/guests

# Rebuilds the committed C guest from its source (Debian packages clang, lld).
guests-c:
	guests/policy/refine-c/build.sh

# test-unit also runs the short soak (soak.TestSoak; docs/soak.md).
test: test-unit test-race

test-unit:
	$(GO) test -count=1 -timeout 30m ./...

test-race:
	$(GO) test -count=1 -race $(RACE_PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd bench/dbospeer && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Every benchmark, written up as docs/benchmarks.md (figures beside their
# peers from the same run, ratios, targets). BENCHTIME sets the throughput
# benchmarks' length.
BENCHTIME ?= 3s
HOSTS_RUNS ?= 200
HOSTS_PAIRS ?= 3
bench:
	$(GO) run ./internal/benchreport -out docs/benchmarks.md -benchtime $(BENCHTIME) -hosts-runs $(HOSTS_RUNS) -hosts-pairs $(HOSTS_PAIRS)

# The several-hosts CPU benchmark alone (part of `make bench` at its default
# size): three serve processes on one pgstore database against one, runs of
# 1.3 s, 40 and 150 clients, HOSTS_PAIRS pairs of rounds of HOSTS_RUNS runs.
# PostgreSQL from AGENTHOST_PG_URL, or started from the machine's binaries.
bench-hosts:
	$(GO) test -run '^$$' -bench HostsCPU -benchtime $(HOSTS_RUNS)x -count 1 -timeout 60m -v ./soak -hostscpu.pairs=$(HOSTS_PAIRS)

# The runtime's deterministic simulation with more seeds than `make test`
# runs (2,000). Replay one failing seed with:
#   go test ./host -run TestSimulation -sim.seed=N -v
sim:
	$(GO) test -count=1 -run '^TestSimulation$$' ./host -sim.seeds=$(SEEDS) -timeout 0

# Plants each bug of the catalogue (internal/mutants/catalogue.go) in a
# scratch copy, runs the simulation (MUTANT_SEEDS seeds, stopping at the
# first failure) and the property test against it, and fails when the
# simulation misses one (docs/simulation.md).
MUTANT_SEEDS ?= 2000
mutants:
	$(GO) run ./internal/mutants -seeds $(MUTANT_SEEDS)

# The soak (docs/soak.md): agenthost serve on badgerstore under load, killed
# with SIGKILL (server and driver) at random moments, checked over HTTP.
# `make soak` runs the full profile (runs of three tool-calling steps),
# `make soak PROFILE=short` the short one (also part of `make test`),
# PROFILE=steps-short the short one with tool-calling steps. Replay a
# failure with SEED=N. STRICT_STEPS=1 fails on any tool call made again
# after its result was committed even where the server shows no durable
# steps.
PROFILE ?= full
SEED    ?=
STRICT_STEPS ?=
soak:
	$(GO) run ./cmd/agenthost-loadgen soak -profile $(PROFILE) $(if $(SEED),-seed $(SEED)) $(if $(STRICT_STEPS),-strict-steps)

# The nemeses (docs/soak.md): `make soak PROFILE=pause|postgres|diskfull`
# runs one (-short variants too), `make soak-nemeses` the three full ones.
NEMESES ?= pause postgres diskfull
soak-nemeses:
	for p in $(NEMESES); do $(GO) run ./cmd/agenthost-loadgen soak -profile $$p $(if $(SEED),-seed $(SEED)) || exit 1; done

# The short soak alone, as `make test` runs it.
test-soak:
	AGENTHOST_SOAK_PROFILE=short $(if $(SEED),AGENTHOST_SOAK_SEED=$(SEED)) $(GO) test -count=1 -run '^TestSoak$$' -v ./soak
