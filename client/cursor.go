package client

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Cursor is where the caller durably records how far it has processed an agent's
// log. The client calls Store(seq) after OnEvent returned nil for that event, and
// Load when it resubscribes after a drop: the resubscription starts at the loaded
// seq + 1. One cursor belongs to one agent.
type Cursor interface {
	// Load returns the highest recorded seq; ok is false when nothing is recorded yet.
	Load() (seq int64, ok bool, err error)
	// Store records seq as processed. An error stops the client.
	Store(seq int64) error
}

// MemoryCursor records in memory: it survives reconnects, not the process. The zero
// value is ready to use and safe for concurrent use.
type MemoryCursor struct {
	mu  sync.Mutex
	seq int64
	ok  bool
}

// Load returns the stored seq.
func (m *MemoryCursor) Load() (int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seq, m.ok, nil
}

// Store keeps seq.
func (m *MemoryCursor) Store(seq int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq, m.ok = seq, true
	return nil
}

// FileCursor records the seq in a file, as decimal text. Each Store writes a
// temporary file in the same directory, syncs it and renames it over the cursor, so
// the file always holds a whole seq, old or new, even across a crash. A sync per
// event costs a disk flush; callers storing many events per second can wrap it.
type FileCursor struct {
	mu   sync.Mutex
	path string
}

// NewFileCursor returns a cursor kept at path. The file need not exist yet; its
// directory must.
func NewFileCursor(path string) *FileCursor { return &FileCursor{path: path} }

// Load reads the file. A missing file means nothing is recorded (ok false); an
// unreadable or malformed one is an error.
func (f *FileCursor) Load() (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("client: load cursor %s: %w", f.path, err)
	}
	seq, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || seq < 0 {
		return 0, false, fmt.Errorf("client: load cursor %s: not a seq: %q", f.path, b)
	}
	return seq, true, nil
}

// Store replaces the file's seq atomically.
func (f *FileCursor) Store(seq int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := writeFileAtomic(f.path, []byte(strconv.FormatInt(seq, 10)+"\n")); err != nil {
		return fmt.Errorf("client: store cursor %s: %w", f.path, err)
	}
	return nil
}

func writeFileAtomic(path string, b []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(b); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is; not every filesystem can sync one.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
