// Package privatefile writes and reads the files that hold `terret dev`'s secrets (the
// DynamoDB Local key, the instance records, the --ready-file) so that no other user of
// the machine can read them, replace them or hand one of their own in their place.
//
// A file is created only in a private directory: one owned by this user that no one
// else can write, under ancestors that are owned by this user or root and that others
// cannot write (or that are sticky, like /tmp, where others cannot move our entries).
// It is created with O_EXCL and mode 0600 under a random name, then renamed into place,
// so that a file, a symlink or a hard link another user planted is never written
// through. A file is read only when it is a regular file (not a symlink) owned by this
// user and closed to the group and others.
package privatefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Errors, matched with errors.Is.
var (
	// ErrSharedDir: a directory (or an ancestor) is not private to this user.
	ErrSharedDir = errors.New("privatefile: directory is not private to this user")
	// ErrNotOwn: a file is a symlink, not a regular file, owned by another user, or
	// readable or writable by the group or others.
	ErrNotOwn = errors.New("privatefile: file is not this user's own private file")
)

// CheckDir returns nil when dir is private: an existing directory (not a symlink) owned
// by this user with no write bit for the group or others, whose every ancestor is owned
// by this user or root and is either closed to the group's and others' writes or
// sticky. Otherwise it returns an error wrapping ErrSharedDir that names the directory.
func CheckDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	uid := uint32(os.Geteuid())
	fi, err := os.Lstat(abs)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink", ErrSharedDir, abs)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrSharedDir, abs)
	case !ok || st.Uid != uid:
		return fmt.Errorf("%w: %s belongs to another user", ErrSharedDir, abs)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s is writable by others (mode %04o): use a directory only you can write", ErrSharedDir, abs, fi.Mode().Perm())
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !ok || st.Uid != uid && st.Uid != 0:
			return fmt.Errorf("%w: %s, above %s, belongs to another user", ErrSharedDir, p, abs)
		case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0:
			return fmt.Errorf("%w: %s, above %s, is writable by others (mode %04o) and not sticky", ErrSharedDir, p, abs, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// MkdirAll creates dir (mode 0700) and its missing parents, and checks that it is
// private (CheckDir).
func MkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return CheckDir(dir)
}

// Write stores b at path, replacing the file there if it is this user's own: it creates
// a new file with O_EXCL and mode 0600 under a random name in path's directory, which
// must be private, and renames it into place, so a reader sees the whole file or none.
// A symlink or another user's file at path is refused, never written through.
func Write(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := CheckDir(dir); err != nil {
		return err
	}
	if err := replaceable(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp") // O_EXCL, 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// Create stores b in a new file at path with O_EXCL, O_NOFOLLOW and mode 0600, in a
// private directory; it fails (fs.ErrExist) if anything is at path already.
func Create(path string, b []byte) error {
	if err := CheckDir(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// Read returns the contents of path, which must be this user's own private file: a
// regular file (a symlink is not followed), owned by this user, with no permission for
// the group or others. Any other file is refused with ErrNotOwn.
func Read(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symlink", ErrNotOwn, path)
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := own(path, fi); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// own reports whether fi is this user's own private regular file.
func own(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrNotOwn, path)
	case !ok || st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%w: %s belongs to another user", ErrNotOwn, path)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%w: %s is open to other users (mode %04o)", ErrNotOwn, path, fi.Mode().Perm())
	}
	return nil
}

// replaceable returns nil when nothing is at path or this user's own regular file is.
func replaceable(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symlink", ErrNotOwn, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || st.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("%w: %s is not a regular file of this user's", ErrNotOwn, path)
	}
	return nil
}
