#!/usr/bin/env bash
# `make dev`: installs what `terret dev` needs (scripts/deps.sh dev: DynamoDB Local and
# the Go modules, nothing the tests alone use), builds bin/terret and runs
# `bin/terret dev --approvals` with the arguments given. go build reuses its cache: a
# later start relinks only when a source changed, so it takes seconds. Each step prints
# a line first, and a long build or start prints one every 10 s (terret dev its own).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/deps.sh dev

echo "dev: building bin/terret (go build ./cmd/terret: the first build takes a minute or two, later ones seconds)"
mkdir -p bin
go build -o bin/terret ./cmd/terret &
build=$!
trap 'kill "$build" 2>/dev/null; exit 130' INT TERM
# DEV_PROGRESS_EVERY (seconds, default 10) is set only by scripts_test.go, so that its
# slow build shows the lines without waiting 10 s each.
every=${DEV_PROGRESS_EVERY:-10}
waited=0
while kill -0 "$build" 2>/dev/null; do
  sleep 1
  waited=$((waited + 1))
  if ((waited % every == 0)) && kill -0 "$build" 2>/dev/null; then
    echo "dev: building bin/terret: still compiling (${waited} s)"
  fi
done
wait "$build"
trap - INT TERM

echo "dev: starting bin/terret dev --approvals $* (DynamoDB Local, the tables, the gateway; Ctrl-C stops it)"
# terret dev prints each start step and a line every 10 s while one waits, until its
# "listening on" line.
exec bin/terret dev --approvals "$@"
