package dynamotest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// A database of its own for every top-level test.
//
// DynamoDB Local keeps one database per access key and region, and in each database
// one table of stream records, which it keeps for 24 hours as DynamoDB does — past the
// deletion of the table they came from — and which it scans, having no index for it,
// on every write to a table with a stream and every stream read. A server shared by a
// whole test run therefore slowed down with every record the run had written
// (docs/performance.md, "Where the suite's time goes"). So each top-level test reaches its server through a proxy of its own, in the test
// binary, that stamps every request with an access key of the test's: the test's
// records sit in a database that holds only its own.

var (
	proxyMu sync.Mutex
	proxies = map[string]string{} // top-level test name → its proxy's URL

	// proxyTransport is every proxy's connection pool to the servers: many
	// concurrent requests per test (whole stacks), so more idle connections kept than
	// net/http's default of two per host.
	proxyTransport = &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
)

// isolate returns the endpoint through which t's top-level test reaches the server at
// ep: a proxy that signs as the test's own access key (stampKey). The first call of a
// top-level test starts it; it serves until the test binary exits, so that a cleanup
// of any order, or a child process given the endpoint, can still use it. A child test
// binary that isolates the endpoint again changes nothing: the proxy nearest the
// server stamps last.
func isolate(t testing.TB, ep string) string {
	t.Helper()
	top := topLevel(t)
	proxyMu.Lock()
	defer proxyMu.Unlock()
	if p, ok := proxies[top]; ok {
		return p
	}
	p, err := startProxy(ep, newAccessKey())
	if err != nil {
		t.Fatalf("dynamotest: proxy to %s: %v", ep, err)
	}
	proxies[top] = p
	return p
}

// startProxy serves, on a loopback port, a reverse proxy to ep that signs every
// request as key, and returns its URL.
func startProxy(ep, key string) (string, error) {
	target, err := url.Parse(ep)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			if a := r.In.Header.Get("Authorization"); a != "" {
				r.Out.Header.Set("Authorization", stampKey(a, key))
			}
		},
		Transport:  proxyTransport,
		BufferPool: proxyBuffers{},
	}
	go func() { _ = http.Serve(ln, rp) }()
	return "http://" + ln.Addr().String(), nil
}

// proxyBuffers keeps the proxies' copy buffers (32 KB each) for reuse: one per
// request otherwise, garbage in the heap of tests that measure theirs.
type proxyBuffers struct{}

var bufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (proxyBuffers) Get() []byte  { return *bufferPool.Get().(*[]byte) }
func (proxyBuffers) Put(b []byte) { bufferPool.Put(&b) }

// stampKey returns the SigV4 Authorization header auth with its access key replaced
// by key. DynamoDB Local checks no signature; it reads the key to pick the database.
func stampKey(auth, key string) string {
	const cred = "Credential="
	i := strings.Index(auth, cred)
	if i < 0 {
		return auth
	}
	rest := auth[i+len(cred):]
	j := strings.IndexByte(rest, '/')
	if j < 0 {
		return auth
	}
	return auth[:i+len(cred)] + key + rest[j:]
}

// newAccessKey returns a fresh access key: letters and digits only, as DynamoDB Local
// requires.
func newAccessKey() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "TEST" + strings.ToUpper(hex.EncodeToString(b))
}
