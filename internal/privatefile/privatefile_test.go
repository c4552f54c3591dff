package privatefile_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/osusertest"
	"github.com/terret/terret-ws/internal/privatefile"
)

const secret = "SECRET-0123456789"

// TestWriteRacesAnotherUser: a second user of the machine prepares a shared directory
// (mode 0777) the way the attacks on a --ready-file did — a pre-created temporary file
// they can read, a symlink to a file of ours, the target path itself — and Write
// refuses the directory: no byte reaches a file they can read, and our file behind the
// symlink is unchanged.
func TestWriteRacesAnotherUser(t *testing.T) {
	other := osusertest.New(t)
	shared := osusertest.SharedDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, plant string
	}{
		{"pre-created tmp", "touch ready.json.tmp && chmod 666 ready.json.tmp"},
		{"pre-created target", "touch ready.json && chmod 666 ready.json"},
		{"symlink to our file", "ln -s " + victim + " ready.json"},
		{"symlinked tmp", "ln -s " + victim + " ready.json.tmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out, err := other.Sh(t, shared, "rm -f ready.json ready.json.tmp && "+tt.plant); err != nil {
				t.Fatalf("plant as %s: %v: %s", other.Name, err, out)
			}
			err := privatefile.Write(filepath.Join(shared, "ready.json"), []byte(secret))
			if !errors.Is(err, privatefile.ErrSharedDir) {
				t.Fatalf("Write in a directory every user can write: %v, want ErrSharedDir", err)
			}
			out, _ := other.Sh(t, shared, "cat ready.json ready.json.tmp .ready.json.* 2>/dev/null")
			if strings.Contains(out, secret) {
				t.Fatalf("%s read the secret: %q", other.Name, out)
			}
			if b, _ := os.ReadFile(victim); string(b) != "mine\n" {
				t.Fatalf("our file behind the symlink now holds %q", b)
			}
		})
	}
}

// TestWriteInPrivateDir: in a directory only we can write, Write creates a 0600 file, the
// other user cannot read it, and a symlink or another user's file at the path (which
// only we could have put there) is refused, not written through.
func TestWriteInPrivateDir(t *testing.T) {
	other := osusertest.New(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil { // others may traverse, not list or write
		t.Fatal(err)
	}
	for p := filepath.Dir(dir); p != os.TempDir(); p = filepath.Dir(p) {
		_ = os.Chmod(p, 0o711)
	}
	path := filepath.Join(dir, "ready.json")
	if err := privatefile.Write(path, []byte(secret)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := privatefile.Write(path, []byte(secret+"2")); err != nil {
		t.Fatalf("Write over our own file: %v", err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("ready.json: %v %v, want mode 0600", fi.Mode(), err)
	}
	if out, err := other.Sh(t, dir, "cat ready.json"); err == nil || strings.Contains(out, secret) {
		t.Fatalf("%s read our file: %q (%v)", other.Name, out, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %v, want ready.json alone (no temporary file left)", entries)
	}

	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if err := privatefile.Write(link, []byte("x")); !errors.Is(err, privatefile.ErrNotOwn) {
		t.Fatalf("Write to a symlink: %v, want ErrNotOwn", err)
	}
	theirs := filepath.Join(dir, "theirs.json")
	if err := os.WriteFile(theirs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, other.UID, other.GID); err != nil {
		t.Fatal(err)
	}
	if err := privatefile.Write(theirs, []byte("x")); !errors.Is(err, privatefile.ErrNotOwn) {
		t.Fatalf("Write over another user's file: %v, want ErrNotOwn", err)
	}
	if err := privatefile.Create(path, []byte("x")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want ErrExist", err)
	}
}

// TestRead: only our own regular file closed to others is read.
func TestRead(t *testing.T) {
	other := osusertest.New(t)
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(secret), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := write("own", 0o600)
	theirs := write("theirs", 0o600)
	if err := os.Chown(theirs, other.UID, other.GID); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       error
	}{
		{"own 0600", own, nil},
		{"open to others", write("open", 0o644), privatefile.ErrNotOwn},
		{"group readable", write("group", 0o640), privatefile.ErrNotOwn},
		{"another user's", theirs, privatefile.ErrNotOwn},
		{"symlink to our own", link, privatefile.ErrNotOwn},
		{"missing", filepath.Join(dir, "none"), fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := privatefile.Read(tt.path)
			if !errors.Is(err, tt.want) || err == nil && string(b) != secret {
				t.Fatalf("Read: %q, %v; want %v", b, err, tt.want)
			}
		})
	}
}

// TestCheckDir: the directory itself must be ours and closed to others' writes; an
// ancestor may be open to others only when sticky (/tmp).
func TestCheckDir(t *testing.T) {
	other := osusertest.New(t)
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	theirs := mk("theirs", 0o755)
	if err := os.Chown(theirs, other.UID, other.GID); err != nil {
		t.Fatal(err)
	}
	mk("open", 0o777)
	mk("sticky", 0o777|fs.ModeSticky)
	if err := os.Symlink(mk("real", 0o700), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		ok        bool
	}{
		{"private", mk("private", 0o700), true},
		{"readable by others", mk("readable", 0o755), true},
		{"group writable", mk("group", 0o770), false},
		{"every user writes", filepath.Join(base, "open"), false},
		{"sticky, every user writes", filepath.Join(base, "sticky"), false},
		{"under a sticky directory", mk("sticky/mine", 0o700), true},
		{"under a directory every user writes", mk("open/mine", 0o700), false},
		{"another user's", theirs, false},
		{"ours under another user's", mk("theirs/mine", 0o700), false},
		{"a symlink", filepath.Join(base, "link"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := privatefile.CheckDir(tt.dir)
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, privatefile.ErrSharedDir) {
				t.Fatalf("CheckDir(%s) = %v, want ok=%v", tt.dir, err, tt.ok)
			}
		})
	}
}
