package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/osusertest"
	"github.com/terret/terret-ws/internal/webui"
)

// TestReadyFileOtherUser: another user of the machine pre-creates ready.json.tmp (mode
// 0666, theirs) in a directory every user can write, where the developer points
// --ready-file. terret dev refuses the directory before it starts anything, with exit
// status 2 and a message naming the flag; the other user reads nothing of the
// instance (its addresses, DynamoDB key and page key) in any file there.
func TestReadyFileOtherUser(t *testing.T) {
	t.Parallel()
	other := osusertest.New(t)
	shared := osusertest.SharedDir(t)
	if out, err := other.Sh(t, shared, "touch ready.json.tmp && chmod 666 ready.json.tmp"); err != nil {
		t.Fatalf("plant as %s: %v: %s", other.Name, err, out)
	}
	ready := filepath.Join(shared, "ready.json")
	cmd := exec.Command(terretBin(t), "dev", "--addr", "127.0.0.1:0", "--ready-file", ready,
		"--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("rf")+"-")
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
	stdout, stderr := &syncBuf{}, &syncBuf{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var waitErr error
	done := false
	hang.UntilNil(t, "terret dev to exit or write its ready file", func() error {
		select {
		case waitErr = <-exited:
			done = true
			return nil
		default:
		}
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		return errors.New("neither yet")
	})
	out, _ := other.Sh(t, shared, "cat ready.json ready.json.tmp .ready.json.* 2>/dev/null")
	if strings.Contains(out, "ws_url") {
		t.Fatalf("%s read the instance's ready file:\n%s", other.Name, out)
	}
	var ee *exec.ExitError
	if !done || !errors.As(waitErr, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("terret dev: exited=%v %v, want exit status 2\nstdout:\n%s\nstderr:\n%s", done, waitErr, stdout, stderr)
	}
	if want := fmt.Sprintf("--ready-file %s: privatefile: directory is not private to this user: %s is writable by others", ready, shared); !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr lacks %q:\n%s", want, stderr)
	}
}

// TestDevTokenBoundToUser: another user of the machine can load the page over loopback
// but cannot mint a token: /dev/token refuses their request (the X-Terret-Dev header
// without the page key, from their own process), and the key is where only the
// developer reads it — the console line of the page's address and the 0600 instance
// record, which the other user cannot open. The developer's request with the key
// gets a token.
func TestDevTokenBoundToUser(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is needed to send the other user's requests")
		}
		t.Skip("no curl to send the other user's requests")
	}
	other := osusertest.New(t)
	p := startDev(t, "--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("dk")+"-")
	page, key, ok := strings.Cut(p.ready.PageURL, webui.KeyFragment)
	if !ok || len(key) != 32 || page != "http://"+p.ready.Addr+"/" {
		t.Fatalf("page_url %q: want http://%s/%sKEY", p.ready.PageURL, p.ready.Addr, webui.KeyFragment)
	}
	if line := "terret dev: web page at " + p.ready.PageURL + "\n"; !strings.Contains(p.stdout.String(), line) {
		t.Fatalf("console lacks %q:\n%s", line, p.stdout)
	}
	mint := "http://" + p.ready.Addr + "/dev/token?agent=a1"
	// The other user: the page loads, the token endpoint refuses.
	out, err := other.Sh(t, "/", "curl -s -o /dev/null -w '%{http_code}' "+page)
	if err != nil || out != "200" {
		t.Fatalf("%s loading the page: %q %v, want 200", other.Name, out, err)
	}
	for _, header := range []string{"X-Terret-Dev: 1", "X-Terret-Dev: " + strings.Repeat("0", 32)} {
		out, err := other.Sh(t, "/", "curl -s -w ' %{http_code}' -H '"+header+"' '"+mint+"'")
		if err != nil || !strings.HasSuffix(out, " 403") || strings.Contains(out, "tt_") {
			t.Fatalf("%s minting with %q: %q %v, want 403 and no token", other.Name, header, out, err)
		}
	}
	records, _ := filepath.Glob(filepath.Join(devstate.Dir(p.stateDir), "*.json"))
	if len(records) != 1 {
		t.Fatalf("instance records %v, want one", records)
	}
	for _, f := range []string{records[0], filepath.Join(p.stateDir, "ready.json")} {
		// Let them reach the directory, as on a machine whose home directories are 0755.
		for d := filepath.Dir(f); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			_ = os.Chmod(d, 0o755)
		}
		if out, err := other.Sh(t, "/", "cat "+f); err == nil || strings.Contains(out, key) {
			t.Fatalf("%s read %s: %q %v", other.Name, f, out, err)
		}
	}
	// The developer, with the key.
	req, _ := http.NewRequest(http.MethodGet, mint, nil)
	req.Header.Set(webui.DevTokenHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"token":"tt_`) {
		t.Fatalf("/dev/token with the key: %d %s, want a token", resp.StatusCode, body)
	}
}

// TestEmulatorRefusedWithOtherUsers: with another login account on the machine
// (useradd), `terret dev --lambda-emulator` refuses to start before it starts anything
// — the profile is read, no DynamoDB, no build — naming the account and the flag that
// overrides; --lambda-emulator-multi-user starts past the check with a warning naming
// the account (and then fails on the DynamoDB endpoint given, which answers nothing).
// Without the emulator the other account is no reason to refuse.
func TestEmulatorRefusedWithOtherUsers(t *testing.T) {
	t.Parallel()
	other := osusertest.New(t)
	run := func(extra ...string) (stdout, stderr string, code int) {
		args := append([]string{"dev", "--addr", "127.0.0.1:0", "--dynamodb-endpoint", "http://127.0.0.1:1"}, extra...)
		cmd := exec.Command(terretBin(t), args...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("terret %v: %v, want an exit status\nstderr:\n%s", args, err, e.String())
		}
		return o.String(), e.String(), ee.ExitCode()
	}
	stdout, stderr, code := run("--lambda-emulator")
	if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "terret dev: --lambda-emulator refused: other users log in to this machine (") ||
		!strings.Contains(stderr, other.Name) || !strings.Contains(stderr, "pass --lambda-emulator-multi-user if you trust every user here") {
		t.Fatalf("--lambda-emulator with %s here: exit %d, stdout %q, stderr:\n%s", other.Name, code, stdout, stderr)
	}
	if strings.Contains(stderr, "DynamoDB") || strings.Contains(stderr, "build") {
		t.Fatalf("refused after starting something:\n%s", stderr)
	}
	_, stderr, code = run("--lambda-emulator", "--lambda-emulator-multi-user")
	if code != 1 || !strings.Contains(stderr, "terret dev: warning: --lambda-emulator-multi-user: ") || !strings.Contains(stderr, other.Name) || strings.Contains(stderr, "--lambda-emulator refused") {
		t.Fatalf("--lambda-emulator-multi-user: exit %d, stderr:\n%s", code, stderr)
	}
	if _, stderr, _ = run(); strings.Contains(stderr, "--lambda-emulator refused") || strings.Contains(stderr, "multi-user") {
		t.Fatalf("without --lambda-emulator:\n%s", stderr)
	}
}

// TestOtherLoginUsers: who counts as another user who logs in.
func TestOtherLoginUsers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	writeFile(t, passwd, strings.Join([]string{
		"root:x:0:0:root:/root:/bin/bash",
		"daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin",
		"postgres:x:107:113::/var/lib/postgresql:/bin/bash", // a service, below UID_MIN
		"dev:x:1000:1000::/home/dev:/bin/bash",              // self
		"alice:x:1001:1001::/home/alice:/bin/zsh",
		"locked:x:1002:1002::/home/locked:/usr/sbin/nologin",
		"noshell:x:1003:1003::/home/noshell:/bin/false",
		"plain:x:1004:1004::/home/plain:", // empty shell: /bin/sh
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/sh",
		"bad line",
		"",
	}, "\n"))
	defs := filepath.Join(dir, "login.defs")
	writeFile(t, defs, "# comment\nUID_MIN\t\t 1000\nUID_MAX 60000\n")
	tests := []struct {
		name, defs string
		self       int
		want       string
	}{
		{"developer", defs, 1000, "alice plain"},
		{"root", defs, 0, "dev alice plain"},
		{"alice", defs, 1001, "dev plain"},
		{"no login.defs: 1000", filepath.Join(dir, "none"), 1000, "alice plain"},
	}
	for _, tt := range tests {
		got, err := otherLoginUsers(passwd, tt.defs, tt.self)
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("%s: %v, %v; want %s", tt.name, got, err, tt.want)
		}
	}
	single := filepath.Join(dir, "single")
	writeFile(t, single, "root:x:0:0:root:/root:/bin/bash\ndev:x:1000:1000::/home/dev:/bin/bash\n")
	var warn strings.Builder
	if err := admitEmulator(single, defs, 1000, false, &warn); err != nil || warn.Len() != 0 {
		t.Fatalf("a machine of one user: %v %q", err, warn.String())
	}
	if err := admitEmulator(passwd, defs, 1000, false, &warn); !errors.Is(err, errSharedMachine) || !strings.Contains(err.Error(), "(alice, plain)") {
		t.Fatalf("a shared machine: %v, want errSharedMachine naming alice, plain", err)
	}
	if err := admitEmulator(passwd, defs, 1000, true, &warn); err != nil || !strings.Contains(warn.String(), "alice, plain can read") {
		t.Fatalf("a shared machine, forced: %v %q", err, warn.String())
	}
	if err := admitEmulator(filepath.Join(dir, "none"), defs, 1000, false, &warn); err == nil {
		t.Fatal("no passwd: admitted")
	}
}

// TestDataDirShared: terret dev refuses a --data-dir every user can write before it
// starts DynamoDB Local, naming the flag, and leaves nothing there.
func TestDataDirShared(t *testing.T) {
	t.Parallel()
	shared := osusertest.SharedDir(t)
	cmd := exec.Command(terretBin(t), "dev", "--addr", "127.0.0.1:0", "--data-dir", shared)
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 ||
		!strings.Contains(string(out), "terret dev: --data-dir: dynamolocal: data directory "+shared+": privatefile: directory is not private to this user") {
		t.Fatalf("terret dev --data-dir %s: %v\n%s", shared, err, out)
	}
	if entries, _ := os.ReadDir(shared); len(entries) != 0 {
		t.Fatalf("the shared directory now holds %v", entries)
	}
}
