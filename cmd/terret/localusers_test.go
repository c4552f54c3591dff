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
