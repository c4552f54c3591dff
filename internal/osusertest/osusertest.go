// Package osusertest gives a test a second user of this machine: a throwaway account
// made with useradd (deleted when the test ends) and a way to run a shell command as
// it. Tests of what another local user can and cannot do use it. Creating an account
// needs root; where the suite cannot (not root, no useradd), the test is skipped —
// except under CI=true, where it fails, since CI runs as root.
package osusertest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// User is a throwaway account.
type User struct {
	Name     string
	UID, GID int
}

// New creates a throwaway login account (shell /bin/sh, no home directory) and
// deletes it when t ends.
func New(t testing.TB) User {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if _, err := exec.LookPath("useradd"); err != nil {
		why = "no useradd"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("osusertest: cannot create a second user (%s), and CI=true requires it", why)
		}
		t.Skipf("osusertest: cannot create a second user: %s", why)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "terret-t" + hex.EncodeToString(b)
	var out []byte
	var err error
	// useradd locks /etc/passwd; a concurrent useradd elsewhere makes it fail at once.
	for try := 0; try < 50; try++ {
		if out, err = exec.Command("useradd", "-M", "-s", "/bin/sh", name).CombinedOutput(); err == nil || !strings.Contains(string(out), "lock") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("osusertest: useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		for try := 0; try < 50; try++ {
			out, err := exec.Command("userdel", name).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "lock") {
				if err != nil {
					t.Errorf("osusertest: userdel %s: %v: %s", name, err, out)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("osusertest: look up %s: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return User{Name: name, UID: uid, GID: gid}
}

// Sh runs script with /bin/sh as u, in dir, and returns its combined output.
func (u User) Sh(t testing.TB, dir, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// SharedDir returns a new directory, under t's temporary directory, that every user
// can write and that is not sticky (mode 0777): what a shared project directory or a
// careless chmod gives.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's parent is 0700; other users must be able to reach the shared one.
	for p := dir; p != os.TempDir() && p != "/"; p = parent(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
