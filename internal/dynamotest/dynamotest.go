// Package dynamotest gives tests a real DynamoDB: DynamoDB Local, AWS's own emulator.
//
// The endpoint is TERRET_TEST_DYNAMODB_ENDPOINT when set. `make test` starts three
// DynamoDB Locals and sets it to all of them, comma-separated: one server answers
// requests on about one core, so with one the whole-stack tests would queue on it and
// leave the machine's other core idle (docs/performance.md, "Where the suite's time
// goes"). Each top-level test gets the server the fewest of the binary's running tests
// hold (pick), and keeps it for its subtests and cleanups. Otherwise the first test that
// asks starts DynamoDB Local for the test binary. Each top-level test reaches its server
// through a proxy of its own that gives it a database of its own there (isolate.go):
// a server's cost per write grows with the stream records its database holds. Tests
// get tables under unique names, so packages and tests run in parallel. When no
// DynamoDB can be had, tests are skipped — except under CI=true, where that is a
// failure: CI never passes by skipping the store.
package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/tables"
)

// EnvEndpoint names the variable holding already running DynamoDB endpoints: one, or
// several separated by commas.
const EnvEndpoint = "TERRET_TEST_DYNAMODB_ENDPOINT"

var (
	once      sync.Once
	endpoints []string
	startErr  error

	mu       sync.Mutex
	assigned = map[string]int{} // top-level test name → its endpoint's index
	running  []int              // by endpoint index: this binary's tests holding it, not ended
)

// Endpoint returns the DynamoDB endpoint of t's top-level test, starting DynamoDB
// Local if there is none: the same endpoint for every call within one top-level test.
func Endpoint(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if e := os.Getenv(EnvEndpoint); e != "" {
			for ep := range strings.SplitSeq(e, ",") {
				if ep = strings.TrimSpace(ep); ep != "" {
					endpoints = append(endpoints, ep)
				}
			}
			if len(endpoints) == 0 {
				startErr = errNoEndpoint
			}
			return
		}
		// The start is bounded as any wait for a condition (internal/hang): on a loaded
		// machine the JVM may take minutes, which is no failure; a hang is.
		ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
		defer cancel()
		srv, err := dynamolocal.Start(ctx, dynamolocal.Options{})
		if err != nil {
			startErr = err
			return
		}
		endpoints = []string{srv.Endpoint()}
		// Children of this test binary (multi-process tests) reuse this server.
		os.Setenv(EnvEndpoint, srv.Endpoint())
	})
	if startErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("dynamotest: no DynamoDB for tests under CI: %v", startErr)
		}
		t.Skipf("dynamotest: no DynamoDB (%v); run `make test`", startErr)
	}
	return isolate(t, pick(t, endpoints))
}

// pick gives t's top-level test (a subtest's name starts with its parent's, then "/")
// its endpoint: the one it was given before, or the one fewest of this binary's running
// tests hold — so that a long test (a whole stack playing rounds) does not have the
// next ones queue behind it on the same server. Ties go in turn from a place of the
// binary's own (a hash of its name), so that the first test of every package does not
// land on the same server.
func pick(t testing.TB, eps []string) string {
	if len(eps) == 1 {
		return eps[0]
	}
	top := topLevel(t)
	mu.Lock()
	defer mu.Unlock()
	if i, ok := assigned[top]; ok {
		return eps[i]
	}
	if running == nil {
		running = make([]int, len(eps))
	}
	best := -1
	for k := range eps {
		i := (binaryOffset() + len(assigned) + k) % len(eps)
		if best < 0 || running[i] < running[best] {
			best = i
		}
	}
	assigned[top] = best
	running[best]++
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		running[best]--
	})
	return eps[best]
}

// topLevel is the name of t's top-level test: a subtest's name starts with its
// parent's, then "/".
func topLevel(t testing.TB) string {
	top, _, _ := strings.Cut(t.Name(), "/")
	return top
}

// binaryOffset is where this test binary starts its turns.
func binaryOffset() int {
	h := fnv.New32a()
	h.Write([]byte(filepath.Base(os.Args[0])))
	return int(h.Sum32() % 1024)
}

var errNoEndpoint = errors.New(EnvEndpoint + " names no endpoint")

// Client returns a DynamoDB client for the test endpoint.
//
// Each request it sends is bounded as any wait (internal/hang): a server that stops
// answering fails the test with the request's error within minutes, instead of holding
// it until the test binary's deadline.
func Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return dynamolocal.Client(Endpoint(t), func(o *dynamodb.Options) { o.HTTPClient = boundedHTTP() })
}

// boundedHTTP is the SDK's HTTP client with each request bounded by hang.Bound.
func boundedHTTP() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTimeout(hang.Bound())
}

// StreamsClient returns a DynamoDB Streams client for the test endpoint.
func StreamsClient(t testing.TB) *dynamodbstreams.Client {
	t.Helper()
	return dynamolocal.StreamsClient(Endpoint(t), func(o *dynamodbstreams.Options) { o.HTTPClient = boundedHTTP() })
}

// UniqueName returns prefix followed by a random suffix, for table names and ids.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// CreateTables creates every table of template.yaml under fresh unique names and
// returns the names by logical id (LogTable, ConnectionsTable, …).
func CreateTables(t testing.TB) tables.Names {
	t.Helper()
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		t.Fatalf("dynamotest: %v", err)
	}
	names := tables.NamesWithPrefix(defs, UniqueName("t")+"-")
	// Bounded as any wait (internal/hang): a shared server under load may take
	// minutes to create them.
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	db := Client(t)
	// Drop the tables with the test: a long-lived shared DynamoDB Local slows down as
	// data piles up (their stream records stay, in the test's own database: isolate.go).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
		defer cancel()
		for _, name := range names {
			_, _ = db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	if err := tables.Ensure(ctx, db, defs, names); err != nil {
		t.Fatalf("dynamotest: create the template's tables: %v", err)
	}
	return names
}
