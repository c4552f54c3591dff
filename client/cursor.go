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

// EpochCursor is a Cursor that also records the epoch of the log its seq belongs to
// (hello's epoch), so that a seq recorded in a log since reset or deleted is never
// resumed in the new one. MemoryCursor and FileCursor are EpochCursors. With a plain
// Cursor the client compares epochs only within its own lifetime.
type EpochCursor interface {
	Cursor
	// LoadEpoch returns the recorded epoch, "" when none is.
	LoadEpoch() (string, error)
	// StoreEpoch records epoch; with restart it also forgets the recorded seq, so
	// that Load reports nothing recorded until the next Store.
	StoreEpoch(epoch string, restart bool) error
}

var (
	_ EpochCursor = (*MemoryCursor)(nil)
	_ EpochCursor = (*FileCursor)(nil)
)

// MemoryCursor records in memory: it survives reconnects, not the process. The zero
// value is ready to use and safe for concurrent use.
type MemoryCursor struct {
	mu    sync.Mutex
	seq   int64
	ok    bool
	epoch string
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

// LoadEpoch returns the stored epoch.
func (m *MemoryCursor) LoadEpoch() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, nil
}

// StoreEpoch keeps epoch, forgetting the seq with restart.
func (m *MemoryCursor) StoreEpoch(epoch string, restart bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch = epoch
	if restart {
		m.seq, m.ok = 0, false
	}
	return nil
}

// FileCursor records the seq in a file, as decimal text, followed by the epoch on
// the same line once one is known ("41 9f3c…"; "-" for the seq when only the epoch
// is recorded); a file of the seq alone, as older clients wrote it, loads with no
// epoch. Each Store writes a
// temporary file in the same directory, syncs it and renames it over the cursor, so
// the file always holds a whole seq, old or new, even across a crash. A sync per
// event costs a disk flush; callers storing many events per second can wrap it.
type FileCursor struct {
	mu    sync.Mutex
	path  string
	epoch string // the file's epoch, once read or written
	known bool
}

// NewFileCursor returns a cursor kept at path. The file need not exist yet; its
// directory must.
func NewFileCursor(path string) *FileCursor { return &FileCursor{path: path} }

// Load reads the file. A missing file means nothing is recorded (ok false); an
// unreadable or malformed one is an error.
func (f *FileCursor) Load() (int64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq, ok, _, err := f.read()
	return seq, ok, err
}

// parseCursor reads a cursor file: "SEQ", "SEQ EPOCH" or "- EPOCH".
func parseCursor(b []byte) (seq int64, ok bool, epoch string, err error) {
	fields := strings.Fields(string(b))
	if len(fields) == 0 || len(fields) > 2 {
		return 0, false, "", fmt.Errorf("not a seq: %q", b)
	}
	if len(fields) == 2 {
		epoch = fields[1]
	}
	if fields[0] == "-" && epoch != "" {
		return 0, false, epoch, nil
	}
	seq, err = strconv.ParseInt(fields[0], 10, 64)
	if err != nil || seq < 0 {
		return 0, false, "", fmt.Errorf("not a seq: %q", b)
	}
	return seq, true, epoch, nil
}

// LoadEpoch reads the file's epoch: "" when the file is missing or has none.
func (f *FileCursor) LoadEpoch() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _, epoch, err := f.read()
	return epoch, err
}

func (f *FileCursor) read() (int64, bool, string, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		f.epoch, f.known = "", true
		return 0, false, "", nil
	}
	if err != nil {
		return 0, false, "", fmt.Errorf("client: load cursor %s: %w", f.path, err)
	}
	seq, ok, epoch, err := parseCursor(b)
	if err != nil {
		return 0, false, "", fmt.Errorf("client: load cursor %s: %w", f.path, err)
	}
	f.epoch, f.known = epoch, true
	return seq, ok, epoch, nil
}

// StoreEpoch replaces the file's epoch atomically, keeping its seq unless restart.
func (f *FileCursor) StoreEpoch(epoch string, restart bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq, ok, _, err := f.read()
	if err != nil {
		return err
	}
	line := "- " + epoch
	if ok && !restart {
		line = strconv.FormatInt(seq, 10) + " " + epoch
	}
	if err := writeFileAtomic(f.path, []byte(line+"\n")); err != nil {
		return fmt.Errorf("client: store cursor %s: %w", f.path, err)
	}
	f.epoch, f.known = epoch, true
	return nil
}

// Store replaces the file's seq atomically.
func (f *FileCursor) Store(seq int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known { // read once: a Store per event costs no extra read
		if _, _, _, err := f.read(); err != nil {
			return err
		}
	}
	line := strconv.FormatInt(seq, 10)
	if f.epoch != "" {
		line += " " + f.epoch
	}
	if err := writeFileAtomic(f.path, []byte(line+"\n")); err != nil {
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
