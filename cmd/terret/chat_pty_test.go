//go:build linux

package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

func init() {
	binaryTests = append(binaryTests, struct {
		name string
		run  func(*testing.T, *e2e)
	}{"chat on a terminal", testChatTerminal})
}

// openPTY opens a pseudo-terminal pair with the standard library: /dev/ptmx, unlocked,
// and its /dev/pts/N.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	ioctl := func(req uintptr, arg unsafe.Pointer) error {
		// Fd would switch the file to blocking mode; SyscallConn keeps the poller.
		rc, err := m.SyscallConn()
		if err != nil {
			return err
		}
		var errno syscall.Errno
		if err := rc.Control(func(fd uintptr) {
			_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
		}); err != nil {
			return err
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
	var unlock int32
	if err := ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	var n uint32
	if err := ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pts: %v", err)
	}
	return m, s
}

// screen accumulates what the terminal shows, without colours and carriage returns.
type screen struct {
	mu   sync.Mutex
	text string
	seen int // waitFor searches from here
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

func (s *screen) read(master *os.File) {
	buf := make([]byte, 4096)
	var raw []byte
	for {
		n, err := master.Read(buf)
		raw = append(raw, buf[:n]...)
		s.mu.Lock()
		s.text = ansi.ReplaceAllString(strings.ReplaceAll(string(raw), "\r", ""), "")
		s.mu.Unlock()
		if err != nil {
			return // EIO once the child and every copy of the slave are gone
		}
	}
}

// waitFor waits until re matches what appeared since the last match, and returns the
// submatches.
func (s *screen) waitFor(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	hang.UntilNil(t, "the terminal showing "+re, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		loc := rx.FindStringSubmatchIndex(s.text[s.seen:])
		if loc == nil {
			return fmt.Errorf("it shows:\n%s", s.text)
		}
		m = rx.FindStringSubmatch(s.text[s.seen:])
		s.seen += loc[1]
		return nil
	})
	return m
}

// testChatTerminal drives `terret chat` on a pseudo-terminal as a person would: a
// message and its reply, then a guarded tool call approved from the keyboard.
func testChatTerminal(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("chat")
	master, slave := openPTY(t)
	defer master.Close()
	cmd := e.command(t, nil, "chat", "--agent", agent, "--url", e.url(agent), "--token", e.token(t, agent))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	scr := &screen{}
	go scr.read(master)
	typeLine := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
	}

	scr.waitFor(t, `connected to `+agent)
	typeLine("hello there")
	// The terminal echoes the typed line; the reply is a line of its own, exactly the text.
	scr.waitFor(t, `(?m)^hello there$`)
	scr.waitFor(t, `(?m)^◆ hello there$`)
	scr.waitFor(t, `(?m)^· turn completed$`)

	typeLine(`{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"hi"}}]},{"say":"done"}]}`)
	scr.waitFor(t, `(?m)^⚙ guarded_echo \{"text":"hi"\}$`)
	m := scr.waitFor(t, `(?m)^\? approve guarded_echo call_id=(\S+): /approve (\S+) or /deny (\S+) \[reason\]$`)
	if m[1] != m[2] || m[1] != m[3] {
		t.Fatalf("approval line names different ids: %q", m[0])
	}
	typeLine("/approve " + m[1])
	scr.waitFor(t, `(?m)^· approved `+regexp.QuoteMeta(m[1])+`$`)
	scr.waitFor(t, `(?m)^✓ guarded_echo → \{"text":"hi"\}$`)
	scr.waitFor(t, `(?m)^◆ done$`)
	scr.waitFor(t, `(?m)^· turn completed$`)

	typeLine("/approve " + m[1]) // settled: the server refuses, inline
	scr.waitFor(t, `(?m)^! stale_call: `)
	typeLine("/quit")
	select {
	case err := <-exited:
		exited <- err // for the deferred cleanup
		if err != nil {
			t.Fatalf("chat exited with %v after /quit", err)
		}
	case <-time.After(wait()):
		t.Fatal("chat did not quit")
	}
}

func init() {
	binaryTests = append(binaryTests, struct {
		name string
		run  func(*testing.T, *e2e)
	}{"chat --from past the tip, then Ctrl-D", testChatPastTip})
}

// testChatPastTip: `chat --from N` with N past the log's tip says so and shows what
// follows (a turn it starts); Ctrl-D on a terminal exits at once, even with a turn
// open (parked on an approval).
func testChatPastTip(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("chat")
	master, slave := openPTY(t)
	defer master.Close()
	cmd := e.command(t, nil, "chat", "--agent", agent, "--url", e.url(agent), "--token", e.token(t, agent), "--from", "50")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	scr := &screen{}
	go scr.read(master)
	write := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	scr.waitFor(t, `connected to `+agent+` \(log at seq 0\)`)
	scr.waitFor(t, `(?m)^· replay_truncated: the log ends at seq 0, before --from 50; showing what comes from seq 1 on$`)
	write("past the tip\n")
	scr.waitFor(t, `(?m)^◆ past the tip$`)
	scr.waitFor(t, `(?m)^· turn completed$`)
	// A turn that parks on an approval never ends by itself: Ctrl-D must not wait for it.
	write(`{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"hi"}}]}]}` + "\n")
	scr.waitFor(t, `(?m)^\? approve guarded_echo `)
	write("\x04")
	select {
	case err := <-exited:
		exited <- err // for the deferred cleanup
		if err != nil {
			t.Fatalf("chat exited with %v after Ctrl-D", err)
		}
	case <-time.After(wait()):
		t.Fatal("chat did not exit on Ctrl-D")
	}
}
