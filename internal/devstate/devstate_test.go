package devstate_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/terret/terret-ws/internal/devstate"
)

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func write(t *testing.T, dir string, r devstate.Record) func() {
	t.Helper()
	remove, err := devstate.Write(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	return remove
}

func TestFind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := devstate.Find(dir, ""); !errors.Is(err, devstate.ErrNone) {
		t.Fatalf("Find in an empty state dir: %v, want ErrNone", err)
	}
	// This process stands for a live instance; a second live one is the parent.
	a := devstate.Record{WSURL: "ws://127.0.0.1:3001/agents/{agent_id}/ws", Addr: "127.0.0.1:3001", PID: os.Getpid()}
	b := devstate.Record{WSURL: "ws://127.0.0.1:4002/agents/{agent_id}/ws", Addr: "127.0.0.1:4002", PID: os.Getppid()}
	dead := devstate.Record{WSURL: "ws://127.0.0.1:5003/agents/{agent_id}/ws", Addr: "127.0.0.1:5003", PID: deadPID(t)}
	write(t, dir, a)
	write(t, dir, dead)
	got, err := devstate.Find(dir, "")
	if err != nil || got.PID != a.PID {
		t.Fatalf("Find with one live and one stale record = %+v, %v; want pid %d", got, err, a.PID)
	}
	if _, err := os.Stat(filepath.Join(devstate.Dir(dir), strconv.Itoa(dead.PID)+".json")); !os.IsNotExist(err) {
		t.Fatalf("the stale record is still there (%v)", err)
	}
	write(t, dir, b)
	_, err = devstate.Find(dir, "")
	var amb *devstate.AmbiguousError
	if !errors.As(err, &amb) || len(amb.Running) != 2 || amb.Running[0].Addr != a.Addr || amb.Running[1].Addr != b.Addr {
		t.Fatalf("Find with two live records = %v (%+v), want AmbiguousError listing both by address", err, amb)
	}
	for _, tc := range []struct {
		addr string
		pid  int
	}{
		{"127.0.0.1:4002", b.PID}, {"localhost:4002", b.PID}, {":4002", b.PID}, {"4002", b.PID},
		{"ws://127.0.0.1:3001/agents/x/ws", a.PID}, {"ws://localhost:3001", a.PID},
	} {
		got, err := devstate.Find(dir, tc.addr)
		if err != nil || got.PID != tc.pid {
			t.Errorf("Find(%q) = pid %d, %v; want pid %d", tc.addr, got.PID, err, tc.pid)
		}
	}
	for _, addr := range []string{"127.0.0.1:9999", "10.0.0.1:3001", "wss://api.example.com/prod"} {
		if _, err := devstate.Find(dir, addr); !errors.Is(err, devstate.ErrNoMatch) {
			t.Errorf("Find(%q) = %v, want ErrNoMatch", addr, err)
		}
	}
}

// TestRemoveOnlyOwn: the remover of a record leaves a newer record of the same pid
// (another instance's, after pid reuse) alone.
func TestRemoveOnlyOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := devstate.Record{WSURL: "ws://127.0.0.1:3001/agents/{agent_id}/ws", Addr: "127.0.0.1:3001", PID: os.Getpid()}
	remove := write(t, dir, r)
	other := r
	other.WSURL, other.Addr = "ws://127.0.0.1:3002/agents/{agent_id}/ws", "127.0.0.1:3002"
	write(t, dir, other)
	remove()
	if got, err := devstate.List(dir); err != nil || len(got) != 1 || got[0].Addr != other.Addr {
		t.Fatalf("after removing a replaced record: %+v, %v; want the other one kept", got, err)
	}
	removeOther := write(t, dir, other)
	removeOther()
	if got, _ := devstate.List(dir); len(got) != 0 {
		t.Fatalf("after removing its own record: %+v, want none", got)
	}
}
