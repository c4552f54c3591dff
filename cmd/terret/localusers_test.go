package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/osusertest"
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
