#!/usr/bin/env bash
# `make example`: the own agent of examples/own-agent, with no key and no network. It
# builds bin/terret and the example's programs, starts examples/own-agent/fakemodel (an
# OpenAI-compatible model server on 127.0.0.1:8089) and runs
# `bin/terret dev --profile examples/own-agent/terret.json` from the repository's root;
# terret dev starts the profile's MCP server (go run ./examples/own-agent/orders) on the
# first turn. Arguments go to terret dev. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/deps.sh dev

echo "example: building bin/terret and the example's programs (go build; seconds once cached)"
mkdir -p bin
go build -o bin/terret ./cmd/terret
go build -o bin/fakemodel ./examples/own-agent/fakemodel
go build -o /dev/null ./examples/own-agent/orders # warms go run's cache for the profile's command

bin/fakemodel &
fake=$!
trap 'kill "$fake" 2>/dev/null || true' EXIT
# Wait for its port (a taken port ends it: say so and stop).
for ((i = 0; i < 300; i++)); do
  if (exec 3<>/dev/tcp/127.0.0.1/8089) 2>/dev/null; then break; fi
  if ! kill -0 "$fake" 2>/dev/null; then
    echo "example: fakemodel did not start (is 127.0.0.1:8089 taken? another make example?)" >&2
    exit 1
  fi
  sleep 0.1
done

echo "example: starting bin/terret dev --profile examples/own-agent/terret.json $* (Ctrl-C stops it)"
bin/terret dev --profile examples/own-agent/terret.json "$@"
