package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/terret/terret-ws/internal/localgw"
)

// environment is one execution environment: an aws-lambda-rie process running one
// bootstrap. It serves one invocation at a time (the pool guarantees it).
type environment struct {
	fn     string
	id     int
	cmd    *exec.Cmd
	url    string        // the emulator's invoke endpoint
	exited chan struct{} // closed when the process is gone
	log    *slog.Logger

	initOnce sync.Once
	inited   chan struct{} // closed once the emulator reported the init phase's end
	mu       sync.Mutex
	initDur  time.Duration // the emulator's INIT REPORT
	initErr  string        // the emulator's "Init failed" reason
	initOK   bool          // the emulator's first INIT RTDONE said success
	initSeen bool          // an INIT RTDONE was read
	lines    []string      // the function's last lines of plain output (init errors land here)
	invoked  bool          // an invocation has run: the next one is warm
}

// startupTimeout bounds how long an emulator process may take to listen.
const startupTimeout = 30 * time.Second

// startEnvironment runs rie with bootstrap and exactly env (the emulator hands its own
// environment to the function) and returns once its invoke endpoint listens.
func startEnvironment(ctx context.Context, rie, bootstrap, fn string, id int, env []string, log *slog.Logger) (*environment, error) {
	ps, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	port, apiPort := ps[0], ps[1]
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", apiPort),
		// info: the INIT REPORT line carries the init duration; the rest is dropped.
		"--log-level", "info",
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = env
	// Its own process group, so that a kill takes the bootstrap with it; and killed
	// with this process, so that no environment outlives `terret dev`.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("emulator: start %s environment: %w", fn, err)
	}
	w.Close()
	e := &environment{
		fn: fn, id: id, cmd: cmd, log: log,
		url:    fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port),
		exited: make(chan struct{}),
		inited: make(chan struct{}),
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		e.readOutput(r)
	}()
	go func() {
		_ = cmd.Wait()
		<-readDone
		close(e.exited)
	}()
	if err := e.waitListening(ctx, port); err != nil {
		e.kill()
		return nil, err
	}
	return e, nil
}

func (e *environment) waitListening(ctx context.Context, port int) error {
	deadline := time.Now().Add(startupTimeout)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-e.exited:
			return fmt.Errorf("%w: %s environment %d exited at start: %s", ErrEnvironment, e.fn, e.id, e.lastLines())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s environment %d not listening after %v", ErrEnvironment, e.fn, e.id, startupTimeout)
		}
	}
}

// handedOut holds the ports freePorts returned lately: between the check that a port
// is free and the emulator's bind, another start in this process must not take it.
var handedOut = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

// portQuarantine is how long a handed-out port is not handed out again.
const portQuarantine = time.Minute

// freePorts returns n distinct TCP ports free on 127.0.0.1 and not handed out lately.
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for p, at := range handedOut.at {
		if time.Since(at) > portQuarantine {
			delete(handedOut.at, p)
		}
	}
	var out []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if _, recent := handedOut.at[p]; recent {
			continue
		}
		out = append(out, p)
	}
	for _, p := range out {
		handedOut.at[p] = time.Now()
	}
	return out, nil
}

// kill ends the emulator and the bootstrap and waits for both. The emulator starts the
// bootstrap in a process group of its own, which outlives the emulator's: its groups
// go first.
func (e *environment) kill() {
	pid := e.cmd.Process.Pid
	for _, child := range children(pid) {
		_ = syscall.Kill(-child, syscall.SIGKILL)
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-e.exited
}

// children lists the processes whose parent is pid, from /proc.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, ent := range entries {
		child, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 2 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// The emulator's own log lines ("01 Dec 2026 07:50:29,661 [INFO] (rapid) ...") and the
// lines it prints around each invocation.
var (
	rapidLine  = regexp.MustCompile(`^\d\d \w{3} \d{4} [\d:,]+ \[(\w+)\] \(rapid\) (.*)$`)
	initReport = regexp.MustCompile(`^INIT REPORT\(durationMs: ([\d.]+)\)`)
	initDone   = regexp.MustCompile(`^INIT RTDONE\(status: (\w+)\)`)
	initFailed = regexp.MustCompile(`^Init failed error=(.*?)(?: InvokeID=.*)?$`)
	invokeLine = regexp.MustCompile(`^(START|END|REPORT) RequestId: `)
)

// maxLines is how many lines of the function's plain output an environment keeps for
// an init error's message.
const maxLines = 5

// readOutput forwards the function's JSON log lines to the logger (with function and
// environment), keeps its plain lines for init errors, and reads the emulator's lines
// for the init phase's outcome.
func (e *environment) readOutput(r io.ReadCloser) {
	defer r.Close()
	defer e.initOnce.Do(func() { close(e.inited) })
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := rapidLine.FindStringSubmatch(line); m != nil {
			msg := m[2]
			if d := initDone.FindStringSubmatch(msg); d != nil {
				e.mu.Lock()
				if !e.initSeen {
					e.initSeen, e.initOK = true, d[1] == "success"
				}
				e.mu.Unlock()
			} else if ir := initReport.FindStringSubmatch(msg); ir != nil {
				ms, _ := strconv.ParseFloat(ir[1], 64)
				e.mu.Lock()
				e.initDur = time.Duration(ms * float64(time.Millisecond))
				e.mu.Unlock()
				e.initOnce.Do(func() { close(e.inited) })
			} else if f := initFailed.FindStringSubmatch(msg); f != nil {
				e.mu.Lock()
				e.initErr = f[1]
				e.mu.Unlock()
				e.initOnce.Do(func() { close(e.inited) })
			}
			if m[1] == "ERROR" || m[1] == "WARN" {
				e.log.Debug("emulator", "function", e.fn, "environment", e.id, "line", msg)
			}
			continue
		}
		if invokeLine.MatchString(line) {
			continue
		}
		if e.forwardJSON(line) {
			continue
		}
		e.mu.Lock()
		e.lines = append(e.lines, line)
		if len(e.lines) > maxLines {
			e.lines = e.lines[1:]
		}
		e.mu.Unlock()
		e.log.Info("function output", "function", e.fn, "environment", e.id, "line", line)
	}
}

// forwardJSON logs a JSON log line of the function (log/slog's JSON handler, as
// service.Logger writes) through the logger at its level, with its attributes.
func (e *environment) forwardJSON(line string) bool {
	if !strings.HasPrefix(line, "{") {
		return false
	}
	var rec map[string]any
	if json.Unmarshal([]byte(line), &rec) != nil {
		return false
	}
	msg, ok := rec["msg"].(string)
	if !ok {
		return false
	}
	var level slog.Level
	if s, ok := rec["level"].(string); !ok || level.UnmarshalText([]byte(s)) != nil {
		level = slog.LevelInfo
	}
	attrs := []any{"function", e.fn, "environment", e.id}
	for k, v := range rec {
		switch k {
		case "time", "level", "msg":
		default:
			attrs = append(attrs, k, v)
		}
	}
	e.log.Log(context.Background(), level, msg, attrs...)
	return true
}

// initSucceeded reports whether the init phase ended in success (the runtime then
// exited during the invocation instead).
func (e *environment) initSucceeded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.initOK
}

func (e *environment) lastLines() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "; ")
}

// outcome is what one invocation did to its environment.
type outcome struct {
	out     []byte
	err     error
	cold    bool
	initDur time.Duration
	healthy bool // the environment may take the next invocation
}

// invoke runs one invocation through the emulator's invoke API. An invocation that
// ends the environment's usefulness — init failure, a runtime that exited, a timeout,
// an abandoned invocation — reports healthy false: the pool replaces the environment,
// as Lambda does. clientCtx (the X-Amz-Client-Context header) carries the run's invoke
// secret, without which the function refuses the invocation (package invokesecret).
func (e *environment) invoke(ctx context.Context, requestID, clientCtx string, payload []byte, timeout time.Duration) outcome {
	cold := !e.invoked
	e.invoked = true
	res := outcome{cold: cold}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("X-Amzn-RequestId", requestID)
	req.Header.Set("X-Amz-Client-Context", clientCtx)
	resp, err := http.DefaultClient.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if cold {
		// The emulator logs the init phase's end before the invocation starts; its line
		// is read by now or a moment later.
		select {
		case <-e.inited:
		case <-time.After(time.Second):
		}
		e.mu.Lock()
		res.initDur = e.initDur
		e.mu.Unlock()
	}
	switch {
	case err != nil && ctx.Err() != nil:
		res.err = fmt.Errorf("emulator: %s invocation %s abandoned: %w", e.fn, requestID, ctx.Err())
	case err != nil:
		res.err = fmt.Errorf("%w: %s environment %d: %v: %w", ErrEnvironment, e.fn, e.id, err,
			&localgw.FunctionError{Type: "Runtime.ExitError", Message: fmt.Sprintf("RequestId: %s Error: Runtime exited without providing a reason", requestID)})
	case resp.StatusCode == http.StatusBadGateway && cold && !e.initSucceeded():
		e.mu.Lock()
		reason := e.initErr
		e.mu.Unlock()
		if l := e.lastLines(); l != "" {
			reason = l
		}
		res.err = fmt.Errorf("%w: %s: %w", ErrInit, e.fn,
			&localgw.FunctionError{Type: "Runtime.ExitError", Message: fmt.Sprintf("RequestId: %s Error: init failed: %s", requestID, reason)})
	case resp.StatusCode == http.StatusBadGateway:
		res.err = fmt.Errorf("%w: %s environment %d: %w", ErrEnvironment, e.fn, e.id,
			&localgw.FunctionError{Type: "Runtime.ExitError", Message: fmt.Sprintf("RequestId: %s Error: Runtime exited with error", requestID)})
	case resp.StatusCode != http.StatusOK:
		res.err = fmt.Errorf("%w: %s environment %d answered HTTP %d: %s", ErrEnvironment, e.fn, e.id, resp.StatusCode, body)
	case bytes.HasPrefix(body, []byte("Task timed out after")):
		res.err = fmt.Errorf("%w: %s: %w", ErrTimeout, e.fn,
			&localgw.FunctionError{Type: "Sandbox.Timedout", Message: fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds", requestID, timeout.Seconds())})
	default:
		res.healthy = true
		if fe := functionError(body); fe != nil {
			res.err = fe // the handler's error: the environment stays warm
		} else {
			res.out = body
		}
	}
	return res
}

// functionError decodes the emulator's answer for a handler that returned an error:
// an object of errorMessage, errorType and optionally stackTrace, nothing else.
func functionError(body []byte) *localgw.FunctionError {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	_, hasType := m["errorType"]
	_, hasMsg := m["errorMessage"]
	if !hasType || !hasMsg {
		return nil
	}
	for k := range m {
		if k != "errorType" && k != "errorMessage" && k != "stackTrace" {
			return nil
		}
	}
	var fe localgw.FunctionError
	if json.Unmarshal(body, &fe) != nil {
		return nil
	}
	return &fe
}
