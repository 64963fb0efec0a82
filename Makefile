# kstate — build, test, demo. Everything a fresh Debian machine needs is
# installed by `make deps` (called by demo and test).

GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOBIN         := $(shell $(GO) env GOPATH)/bin
APT_PACKAGES  := librocksdb-dev kcat g++ chromium-headless-shell postgresql
TEST_TIMEOUT  ?= 20m
PKGS          := ./...

.PHONY: test-integration test-static test-units test-k8s-example vet-all vet-shared test-long test-cluster soak bench-peers bench-peers-latency bench-peers-restore test-pebble build-nocgo nocgo-check bench-kv api broker-proof all deps deps-apt deps-go build vet fmt-check lint test test-short demo bench bench-scale bench-micro crash kafka-up kafka-down kafka-topic clean help

all: build

help:
	@echo "make demo       run the end-to-end example on the embedded in-process Kafka"
	@echo "make test       deps, gofmt, vet, then side by side: the real-broker tests (-race, broker proof first),"
	@echo "                 staticcheck and go test -race of every other package; ~6 min on 2 cores"
	@echo "make test-long  make test's tests and the long ones (KSTATE_LONG=1: broker outages, long faults, variants)"
	@echo "make bench      end-to-end benchmark on a real Kafka broker (BENCH_FLAGS=... for kstate bench flags)"
	@echo "make bench-scale  pause benchmark: the longest gap in committed output per partition when an instance joins,"
	@echo "                 is SIGKILLed or stops, Group.Standbys 0 and 1 (~5 min at 2M keys, 1 GB of changelog;"
	@echo "                 SCALE_FLAGS=... for kstate bench scale flags, e.g. --keys 200000 for a quick run)"
	@echo "make bench-peers  kstate vs Kafka Streams, Flink and a raw franz-go pipe on the shared peer harness (~9 min;"
	@echo "                 PEERS=, REPEATS=, N=, KSTATE_ARGS=; prints the table and the commit; before/after in one run:"
	@echo "                 PEERS=\"kstate kstate-before kstreams-eos\" KSTATE_REV_before=<commit>; docs/BENCHMARKS.md)"
	@echo "make bench-peers-latency  the same at RATE=5000 records/s for kstate and Kafka Streams (~4 min)"
	@echo "make bench-peers-restore  restore after deleting local state (1M records), kstate and Kafka Streams (~2 min)"
	@echo "make bench-micro  testing.B micro-benchmarks of state, kv and changelog restore"
	@echo "make bench-kv   kv store micro-benchmarks, RocksDB and Pebble side by side"
	@echo "make test-pebble  the engine, shard, state reader and some integration suites on Pebble"
	@echo "make build-nocgo  build and vet everything with CGO_ENABLED=0 (Pebble only, no RocksDB)"
	@echo "make crash      crash tests with 200 SIGKILLs (CRASH_KILLS=n, KSTATE_CRASH_SEED=s)"
	@echo "make api        regenerate docs/API.md (the public API; a test fails when it drifts)"
	@echo "make soak DURATION=1h  random broker and instance faults on a three-broker cluster for DURATION, then the exact check"
	@echo "make test-cluster  the chaos cases on a three-broker KRaft cluster (KSTATE_CLUSTER=1): broker bounces,"
	@echo "                 coordinator kills, a blackholed broker, under load, exact results (~15 min; docs/RELIABILITY.md)"
	@echo "make kafka-up   start a real Kafka broker on 127.0.0.1:9092 (make kafka-down stops it);"
	@echo "                 CLUSTER=3: three brokers of one cluster on 9092-9094 (replication 3, min ISR 2)"
	@echo "make kafka-topic TOPIC=name [PARTITIONS=n] [COMPACT=1]   create a topic on it"

# deps is idempotent: it installs only what is missing.
deps: deps-apt deps-go

deps-apt:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = "0" ]; then \
			echo ">> installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
		else \
			echo "missing system packages:$$missing"; \
			echo "run: sudo apt-get update && sudo apt-get install -y --no-install-recommends$$missing"; exit 1; \
		fi; \
	fi

deps-go:
	@test -x $(GOBIN)/staticcheck || { echo ">> installing staticcheck"; $(GO) install $(STATICCHECK); }
	@$(GO) mod download
	@cd examples/kubernetes && $(GO) mod download

build: deps
	$(GO) build $(PKGS)

# The second line type-checks the shared-librocksdb link variant
# (internal/kv/link_shared.go; the default on Linux is link_static.go).
vet: vet-all vet-shared

vet-all:
	$(RUN) $(GO) vet $(PKGS)

vet-shared:
	$(RUN) $(GO) vet -tags kstate_rocksdb_shared ./internal/kv/

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

lint:
	$(RUN) $(GOBIN)/staticcheck $(PKGS)

# -count=1: never report a cached pass (CI runs on a machine with a warm
# build cache). The real-broker tests in ./integration start Apache Kafka themselves
# (see kafka/kafkatest); with CI=true a missing broker fails the run.
#
# make test, after gofmt:
#  1. vet, which compiles every package once, with -race (GOFLAGS=-race for
#     every step: staticcheck, through go list -export, and the tests reuse
#     those compiles instead of making their own without -race);
#  2. the rest side by side (-j4), each target's output printed when it ends
#     (-O): the real-broker tests (test-integration: the broker proof, then
#     the others), staticcheck and the shared-librocksdb vet (test-static),
#     and the race tests of every other package (test-units). The
#     real-broker tests are the long pole, but their time goes to waiting on
#     the broker, child processes and session timeouts, not to the CPU (most
#     run in parallel: integration/main_test.go); the other two run under nice, so
#     that the tests that assert durations get the CPU as if alone.
test: deps fmt-check
	@export GOFLAGS="-race $$GOFLAGS"; echo "GOFLAGS=$$GOFLAGS"; \
	$(MAKE) --no-print-directory vet-all && \
	$(MAKE) --no-print-directory -j4 --output-sync=target RUN='$(NICE)' test-integration test-static test-units

test-static: vet-shared lint test-k8s-example

# The Kubernetes example is a module of its own, so that k8s.io/api stays
# out of kstate's go.mod: its manifests decoded strictly and checked
# against what the program reads, and the program run as its pods on the
# embedded Kafka: probes, SIGTERM, a rolling restart, a SIGKILL
# (examples/kubernetes/README.md). Without -race (make test sets it for
# everything else): the program's concurrency is kstate's, raced in the
# module's own tests, and k8s.io/api compiled a second time with the race
# instrumentation costs a cold CI machine a minute of its budget.
test-k8s-example:
	cd examples/kubernetes && $(RUN) $(GO) vet ./... && $(RUN) $(GOBIN)/staticcheck ./... && \
		GOFLAGS="$$(echo "$$GOFLAGS" | sed 's/-race//g')" $(RUN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

INTEGRATION_PARALLEL ?= 2
NICE                 ?= nice -n 10
RUN                  ?=

# The broker proof, then every other real-broker test with the same test
# binary (go caches it: one build).
test-integration: broker-proof
	$(GO) test -race -count=1 -parallel $(INTEGRATION_PARALLEL) -skip '$(BROKER_PROOF)' -timeout $(TEST_TIMEOUT) ./integration/

# Every package but ./integration, the longest first (go test starts them in
# the order given). Most of their time is waiting too (kfake, jar-broker
# and timer tests): UNITS_P packages at once.
UNITS_P     ?= 2
UNITS_FIRST := . ./internal/shard/ ./internal/kv/ ./cmd/kstate/ ./internal/kafka/
test-units:
	$(RUN) $(GO) test -race -count=1 -p $(UNITS_P) -timeout $(TEST_TIMEOUT) $(UNITS_FIRST) $$($(GO) list $(PKGS) | grep -v '/integration$$')

# Prints, in the test log, which Kafka broker kafkatest started and its
# version, and the transactional, compaction and kcat checks (go test hides
# the logs of passing tests without -v).
BROKER_PROOF := ^(TestRealBrokerIdentity|TestCompactedTopicConfig|TestTransactionsReadCommitted|TestKcatInterop)$$
broker-proof:
	$(GO) test -race -count=1 -v -run '$(BROKER_PROOF)' ./integration/

# The tests that are too long for `make test` (broker outages of tens of
# seconds and the like, gated by KSTATE_LONG) together with everything else.
test-long: deps
	KSTATE_LONG=1 $(GO) test -count=1 -parallel $(INTEGRATION_PARALLEL) -timeout 60m $(PKGS)

# The chaos cases on a three-broker KRaft cluster (internal/kafkabroker's
# StartCluster, a proxy in front of each broker): the cluster harness's own
# test and integration/cluster_*_test.go, one after the other (each starts
# its own cluster: three JVMs). See docs/RELIABILITY.md.
test-cluster: deps
	KSTATE_CLUSTER=1 CI=true $(GO) test -count=1 -p 1 -v -timeout 60m -run '^TestCluster' ./internal/kafkabroker/ ./integration/

# The soak (issue #28): one three-broker cluster, the eos application under
# steady input and a random fault every minute or two for DURATION, then the
# exact check and a summary table (SOAK lines). KSTATE_CRASH_SEED=<seed>
# replays the input and the faults' choices. See docs/RELIABILITY.md "Soak".
DURATION ?= 1h
SOAK_TIMEOUT ?= 12h
soak: deps
	@echo "soak: DURATION=$(DURATION) at commit $$(git rev-parse --short HEAD)$$(git diff --quiet HEAD || echo ' (with local changes)')"
	KSTATE_SOAK=$(DURATION) CI=true $(GO) test -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestSoakCluster$$' ./integration/

test-short: deps
	$(GO) test -short $(PKGS)

# The crash tests with many more kills than `make test` runs (40 + 7, and 15
# on the dead-letter path, which gets half of CRASH_KILLS);
# KSTATE_CRASH_SEED=<seed from a log> reproduces a run's random choices.
CRASH_KILLS ?= 200
crash: deps
	KSTATE_CRASH_KILLS=$(CRASH_KILLS) $(GO) test -count=1 -timeout 60m -run '^TestCrash' -v ./integration/

demo: deps
	$(GO) run ./cmd/kstate demo

# ~3-4 minutes: starts a real broker, 3 runs of count and heavy: throughput,
# latency at 5,000 records/s (read_committed), restore after deleting the
# local state; see docs/BENCHMARKS.md.
bench: deps
	$(GO) run ./cmd/kstate bench $(BENCH_FLAGS)

# The pause benchmark of issue #27 (cmd/kstate/bench_scale.go): one real
# broker, 2M keys x 512-byte state preloaded, 5,000 rows/s, instances as
# separate processes joining, SIGKILLed and stopped; see docs/BENCHMARKS.md,
# "Scaling out and failing over".
bench-scale: deps
	$(GO) run ./cmd/kstate bench scale $(SCALE_FLAGS)

# kstate against its peers on ../shared/bench-peers (copied and cached in
# ~/.cache/kstate/bench-peers; Kafka Streams and Flink jars built there by
# mvn once): one real broker, interleaved runs, a summary table with ratios
# to Kafka Streams and the raw pipe. Defaults: PEERS="kstate kstreams-eos
# flink-eos rawpipe-eos" REPEATS=3 N=3000000 (environment or make variables).
# Not part of make test. See docs/BENCHMARKS.md ("Method", "How to reproduce").
bench-peers: deps
	internal/tools/benchpeers/bench-peers.sh

bench-peers-latency: deps
	RATE=$${RATE:-5000} PEERS="$${PEERS:-kstate kstreams-eos}" internal/tools/benchpeers/bench-peers.sh

bench-peers-restore: deps
	RESTORE=1 internal/tools/benchpeers/bench-peers.sh

# The kv micro-benchmarks of both backends (sub-benchmarks backend=rocksdb|pebble).
bench-kv: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s ./internal/kv/

# The engine's suites with Pebble as the default store backend (the env var
# replaces kv.DefaultBackend; tests that pin RocksDB keep it).
test-pebble: deps
	KSTATE_TEST_STATE_BACKEND=pebble $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./internal/engine/... ./internal/shard/... ./statereader/... ./kstatetest/... ./cmd/kstate/
	KSTATE_TEST_STATE_BACKEND=pebble $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^(TestCrashExactlyOnce|TestEngineRestartAfterKill|TestDiskFullApplication|TestSpecCounter|TestSpecTTL|TestChangelogRestoreRealBroker|TestExampleHeartbeat)$$' ./integration/

# nocgo-check (not in `make test`: ~17 s warm but ~2.5 min on CI's cold cache; run by make build-nocgo)
# proves the library, commands and examples build and vet without cgo.
nocgo-check:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	CGO_ENABLED=0 $(GO) vet $(PKGS)

# A cgo-free build: RocksDB (grocksdb and the C++ shims) is left out and
# Pebble is the only, default, store backend. The kstate_nocgo tag does the
# same with cgo on; the last line runs the kv and shard tests that way.
build-nocgo: nocgo-check
	$(GO) test -count=1 -tags kstate_nocgo -run 'Pebble|Conformance|Backend' ./internal/kv/ ./internal/shard/

bench-micro: deps
	$(GO) test -run '^$$' -bench . ./state/... ./changelog/

kafka-up: deps
	$(GO) run ./integration/cmd/kafkabroker $(if $(CLUSTER),-cluster $(CLUSTER)) up

kafka-down:
	$(GO) run ./integration/cmd/kafkabroker down

# make kafka-topic TOPIC=events PARTITIONS=3 [COMPACT=1]: a topic on the
# broker of make kafka-up (go run ./integration/cmd/kafkabroker -h: the rest).
kafka-topic:
	@test -n "$(TOPIC)" || { echo "usage: make kafka-topic TOPIC=name [PARTITIONS=n] [COMPACT=1]"; exit 2; }
	$(GO) run ./integration/cmd/kafkabroker topic create $(TOPIC) -partitions $(or $(PARTITIONS),1) $(if $(COMPACT),-compact)

# Regenerates docs/API.md, the exported API of every public package; the
# apidoc test fails when it is stale.
api:
	$(GO) run ./internal/tools/apidoc

clean:
	$(GO) clean -testcache
