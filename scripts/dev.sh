#!/usr/bin/env bash
# `make dev`: installs what `terret dev` needs (scripts/deps.sh dev: DynamoDB Local and
# the Go modules, nothing the tests alone use), builds bin/terret and runs
# `bin/terret dev --approvals` with the arguments given. go build reuses its cache: a
# later start relinks only when a source changed, so it takes seconds. Each step prints
# a line first, and a long build or start prints one every 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/deps.sh dev

echo "dev: building bin/terret (go build ./cmd/terret: the first build takes a minute or two, later ones seconds)"
mkdir -p bin
go build -o bin/terret ./cmd/terret &
build=$!
trap 'kill "$build" 2>/dev/null; exit 130' INT TERM
waited=0
while kill -0 "$build" 2>/dev/null; do
  sleep 1
  waited=$((waited + 1))
  if ((waited % 10 == 0)) && kill -0 "$build" 2>/dev/null; then
    echo "dev: building bin/terret: still compiling (${waited} s)"
  fi
done
wait "$build"
trap - INT TERM

echo "dev: starting bin/terret dev --approvals $* (DynamoDB Local, the tables, the gateway; Ctrl-C stops it)"
for a in "$@"; do
  case "$a" in --ready-file | --ready-file=*) exec bin/terret dev --approvals "$@" ;; esac
done
# Until terret dev is ready (its --ready-file written), a line every 10 s. terret
# handles Ctrl-C itself: the script passes it on and waits for it to stop.
ready=$(mktemp -u "${TMPDIR:-/tmp}/terret-dev-ready.XXXXXX")
bin/terret dev --approvals --ready-file "$ready" "$@" &
dev=$!
trap 'kill -INT "$dev" 2>/dev/null' INT
trap 'kill -TERM "$dev" 2>/dev/null' TERM
waited=0
while kill -0 "$dev" 2>/dev/null && [ ! -e "$ready" ]; do
  sleep 1
  waited=$((waited + 1))
  if ((waited % 10 == 0)) && [ ! -e "$ready" ] && kill -0 "$dev" 2>/dev/null; then
    echo "dev: terret dev still starting: DynamoDB Local (Java) and the tables (${waited} s)"
  fi
done
rm -f "$ready"
while :; do
  status=0
  wait "$dev" || status=$?
  kill -0 "$dev" 2>/dev/null || break # else a trapped signal ended the wait early
done
exit "$status"
