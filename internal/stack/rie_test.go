package stack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/protocol"
)

// rieModule is the Lambda Runtime Interface Emulator: AWS's own implementation of the
// Runtime API that provided.al2023 gives a bootstrap. go.mod pins its version.
const rieModule = "github.com/aws/aws-lambda-runtime-interface-emulator"

// rieBinary returns the emulator: bin/aws-lambda-rie as scripts/deps.sh installs it, or
// one installed here from the module cache at go.mod's version.
func rieBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	if p := filepath.Join(root, "bin", "aws-lambda-rie"); fileExists(p) {
		return p
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == rieModule {
			version = f[1]
		} else if len(f) >= 3 && f[0] == "require" && f[1] == rieModule {
			version = f[2]
		}
	}
	if version == "" {
		t.Fatalf("go.mod does not require %s", rieModule)
	}
	gobin := t.TempDir()
	// Installed as a module of its own (its dependencies are not in our go.sum).
	run(t, gobin, []string{"GOBIN=" + gobin, "GOFLAGS=-mod=mod"}, buildTimeout, "go", "install", rieModule+"/cmd/aws-lambda-rie@"+version)
	return filepath.Join(gobin, "aws-lambda-rie")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := dynamolocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// recorder is a local stand-in for an AWS HTTP API that records every request.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
	srv  *httptest.Server
}

type recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

func newRecorder(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		rec.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (r *recorder) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

// lambdaEnv resolves fn's environment as the template sets it to this test's local
// stand-ins: tables to names, the management endpoint and functions to local servers,
// parameters to their defaults. It fails on a value it cannot resolve.
func lambdaEnv(t *testing.T, s *Stack, fn Function, tables map[string]string, mgmt string) []string {
	t.Helper()
	env, err := s.Environment(fn)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k, v := range env {
		switch {
		case v == managementEndpoint:
			v = mgmt
		case strings.HasPrefix(v, "${AWS::StackName}-"):
			v = strings.TrimPrefix(v, "${AWS::StackName}-")
		case v == emfNamespace:
			v = "terret/rie"
		case strings.HasPrefix(v, "${") && strings.HasSuffix(v, "}") && tables[strings.Trim(v, "${}")] != "":
			v = tables[strings.Trim(v, "${}")]
		case strings.HasPrefix(v, "${") && strings.HasSuffix(v, "}") && s.Get("Parameters", strings.Trim(v, "${}")) != nil:
			v = jsonScalar(s.Get("Parameters", strings.Trim(v, "${}"), "Default"))
		default:
			t.Fatalf("%s: cannot run %s=%q locally", fn.LogicalID, k, v)
		}
		out = append(out, k+"="+v)
	}
	return out
}

// TestRouteFunctionsUnderRIE builds the connect and message functions the way `sam
// build` does (make build-<LogicalId>, here for this machine's architecture) and runs
// each real bootstrap under the Lambda Runtime Interface Emulator with the environment
// the template gives it, against DynamoDB Local, a recording @connections API and a
// recording Lambda Invoke API. Invoked with the sample events:
//   - connect (events/connect.json, with a token issued for agent-1) answers 200 and
//     asks deliver, asynchronously, for exactly events/deliver-kick.json;
//   - message (events/message-bad-frame.json) answers 200 and posts hello (owed first)
//     then one bad_frame error frame to the connection, keeping it open.
func TestRouteFunctionsUnderRIE(t *testing.T) {
	t.Parallel()
	makeBin := tool(t, "make", "builds the functions")
	s := loadStack(t)
	fs := functions(t, s)
	root := repoRoot(t)
	rie := rieBinary(t)

	const stage = "prod"
	mgmt := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	lam := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	tables := dynamotest.CreateTables(t)
	g, err := s.Globals()
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]*syncBuffer{}
	start := func(id string) int {
		art := t.TempDir()
		run(t, root, nil, buildTimeout, makeBin, "build-"+id, "ARTIFACTS_DIR="+art, "LAMBDA_GOARCH="+runtime.GOARCH)
		env := append(lambdaEnv(t, s, fs[id], tables, mgmt.srv.URL+"/"+stage),
			"DYNAMODB_ENDPOINT="+dynamotest.Endpoint(t),
			"LAMBDA_ENDPOINT="+lam.srv.URL,
			"AWS_ACCESS_KEY_ID="+dynamolocal.AccessKey,
			"AWS_SECRET_ACCESS_KEY="+dynamolocal.SecretKey,
			"AWS_REGION="+dynamolocal.Region,
			"AWS_EC2_METADATA_DISABLED=true",
			"AWS_LAMBDA_FUNCTION_NAME="+fs[id].Name,
			"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(g.Timeout),
			"AWS_LAMBDA_FUNCTION_MEMORY_SIZE="+strconv.Itoa(g.MemorySize),
			"HOME="+t.TempDir(),
		)
		port, out := startRIE(t, id, rie, filepath.Join(art, "bootstrap"), env)
		outputs[id] = out
		return port
	}
	connectPort, messagePort := start("ConnectFunction"), start("MessageFunction")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	token, err := auth.New(dynamotest.Client(t), tables["ConnectionsTable"]).Create(ctx, "agent-1")
	if err != nil {
		t.Fatal(err)
	}
	var connect events.APIGatewayWebsocketProxyRequest
	if err := json.Unmarshal(readEvent(t, "connect.json"), &connect); err != nil {
		t.Fatal(err)
	}
	connect.Headers["Authorization"] = "Bearer " + token
	connect.MultiValueHeaders["Authorization"] = []string{"Bearer " + token}
	connectEvent, _ := json.Marshal(connect)
	invokeRoute(ctx, t, "connect", connectPort, connectEvent)
	// The handler reports the accepted connection as an embedded-metric line on stdout
	// (CloudWatch Logs extracts it; no API call).
	// The emulator relays the function's stdout on its own: the line may land just after
	// the invocation's response.
	hang.UntilNil(t, "connect's EMF metric line", func() error {
		if got := emfMetrics(outputs["ConnectFunction"].String()); !contains(got, "terret/rie/Connections Count function=connect") {
			return fmt.Errorf("metrics %v, want terret/rie/Connections Count function=connect", got)
		}
		return nil
	})

	kicks := lam.requests()
	if len(kicks) != 1 {
		t.Fatalf("connect made %d Lambda invocations, want 1 (hello): %+v", len(kicks), kicks)
	}
	k := kicks[0]
	if k.Method != http.MethodPost || k.Path != "/2015-03-31/functions/deliver/invocations" || k.Header.Get("X-Amz-Invocation-Type") != "Event" {
		t.Errorf("connect invoked %s %s (%s), want an Event invocation of deliver", k.Method, k.Path, k.Header.Get("X-Amz-Invocation-Type"))
	}
	var gotKick, wantKick any
	_ = json.Unmarshal(k.Body, &gotKick)
	_ = json.Unmarshal(readEvent(t, "deliver-kick.json"), &wantKick)
	if !reflect.DeepEqual(gotKick, wantKick) {
		t.Errorf("connect kicked deliver with %s, want events/deliver-kick.json", k.Body)
	}
	if posts := mgmt.requests(); len(posts) > 0 {
		t.Errorf("connect posted to the connection (%d requests) before $connect returned", len(posts))
	}

	var msg events.APIGatewayWebsocketProxyRequest
	badFrame := readEvent(t, "message-bad-frame.json")
	if err := json.Unmarshal(badFrame, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.RequestContext.ConnectionID != connect.RequestContext.ConnectionID {
		t.Fatal("the samples must share the connection id")
	}
	invokeRoute(ctx, t, "message", messagePort, badFrame)

	reqs := mgmt.requests()
	var frames []map[string]any
	for _, r := range reqs {
		if want := "/" + stage + "/@connections/" + msg.RequestContext.ConnectionID; r.Method != http.MethodPost || r.Path != want {
			t.Errorf("management API got %s %s, want only POST %s: a bad frame keeps the connection", r.Method, r.Path, want)
			continue
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
			t.Errorf("post is not SigV4-signed: Authorization %q", r.Header.Get("Authorization"))
		}
		var f map[string]any
		if err := json.Unmarshal(r.Body, &f); err != nil {
			t.Errorf("posted %q: %v", r.Body, err)
		}
		frames = append(frames, f)
	}
	if len(frames) != 2 || frames[0]["type"] != "hello" || frames[1]["type"] != "error" || frames[1]["code"] != string(protocol.CodeBadFrame) || frames[1]["message"] == "" {
		t.Fatalf("posted frames %v, want hello then an error with code bad_frame", frames)
	}
	if frames[0]["session_id"] != "agent-1" || frames[0]["proto"] != 1.0 || frames[0]["last_seq"] != 0.0 {
		t.Errorf("hello = %v, want proto 1, session agent-1, last_seq 0", frames[0])
	}
	if n := len(lam.requests()); n != 1 {
		t.Errorf("the bad frame invoked %d more functions", n-1)
	}
}

// startRIE runs bootstrap under the emulator with exactly env (the emulator hands its
// own environment to the bootstrap) and returns the port of its Invoke API.
func startRIE(t *testing.T, name, rie, bootstrap string, env []string) (int, *syncBuffer) {
	t.Helper()
	port, apiPort := freePort(t), freePort(t)
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", apiPort),
		"--log-level", "error",
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = env
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s under the emulator:\n%s", name, logs.String())
		}
	})
	waitListening(t, port)
	return port, logs
}

// emfMetrics returns the metrics of the CloudWatch EMF lines in a function's output, as
// "Namespace/Name Unit dim=value,…" strings.
func emfMetrics(out string) []string {
	var got []string
	for _, line := range strings.Split(out, "\n") {
		var doc struct {
			AWS *struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name, Unit string }
				}
			} `json:"_aws"`
		}
		var members map[string]any
		if json.Unmarshal([]byte(line), &doc) != nil || doc.AWS == nil || json.Unmarshal([]byte(line), &members) != nil {
			continue
		}
		for _, m := range doc.AWS.CloudWatchMetrics {
			var dims []string
			for _, set := range m.Dimensions {
				for _, d := range set {
					dims = append(dims, fmt.Sprintf("%s=%v", d, members[d]))
				}
			}
			for _, x := range m.Metrics {
				got = append(got, fmt.Sprintf("%s/%s %s %s", m.Namespace, x.Name, x.Unit, strings.Join(dims, ",")))
			}
		}
	}
	return got
}

// invokeRoute invokes the route function behind the emulator on port with event and
// fails unless it returned the route response 200.
func invokeRoute(ctx context.Context, t *testing.T, name string, port int, event []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port), bytes.NewReader(event))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("invoke %s: %v", name, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var answer struct {
		StatusCode int    `json:"statusCode"`
		ErrorType  string `json:"errorType"`
	}
	if err := json.Unmarshal(out, &answer); err != nil || resp.StatusCode != http.StatusOK || answer.ErrorType != "" || answer.StatusCode != http.StatusOK {
		t.Fatalf("%s answered HTTP %d %s, want the route's 200 response", name, resp.StatusCode, out)
	}
}

func waitListening(t *testing.T, port int) {
	t.Helper()
	hang.Until(t, fmt.Sprintf("a listener on %d", port), func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// syncBuffer is a bytes.Buffer safe for the process's two output pipes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		out.WriteString("  " + sc.Text() + "\n")
	}
	return out.String()
}
