package dynamolocal

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/osusertest"
	"github.com/terret/terret-ws/internal/privatefile"
)

// startOrSkip starts DynamoDB Local, or skips where it cannot run (fails under CI).
func startOrSkip(t *testing.T, o Options) *Server {
	t.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		skipOrFail(t, "no java")
	}
	s, err := Start(context.Background(), o)
	if errors.Is(err, ErrNotInstalled) || errors.Is(err, ErrNoRepo) {
		skipOrFail(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func tableNames(t *testing.T, endpoint string, creds Credentials) []string {
	t.Helper()
	out, err := ClientWith(endpoint, creds).ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	return out.TableNames
}

func createTable(t *testing.T, endpoint string, creds Credentials, name string) {
	t.Helper()
	_, err := ClientWith(endpoint, creds).CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
}

// TestPrivateServer: a private server's database opens only with its own credentials —
// a client with the fixed local key, or with another key, sees no table — in memory
// and on disk; on disk the key survives a restart, and a data directory of an older
// shared server keeps its tables.
func TestPrivateServer(t *testing.T) {
	t.Run("in memory", func(t *testing.T) {
		s := startOrSkip(t, Options{Private: true})
		c := s.Credentials()
		if c == LocalCredentials || len(c.AccessKey) < 32 {
			t.Fatalf("private credentials %q are not random", c.AccessKey)
		}
		createTable(t, s.Endpoint(), c, "mine")
		for _, other := range []Credentials{LocalCredentials, newCredentials()} {
			if got := tableNames(t, s.Endpoint(), other); len(got) != 0 {
				t.Fatalf("key %s sees tables %v of the private database", other.AccessKey, got)
			}
		}
		if got := tableNames(t, s.Endpoint(), c); len(got) != 1 || got[0] != "mine" {
			t.Fatalf("own key sees %v, want [mine]", got)
		}
	})
	t.Run("on disk, restarted", func(t *testing.T) {
		dir := t.TempDir()
		s := startOrSkip(t, Options{Private: true, DBPath: dir})
		c := s.Credentials()
		createTable(t, s.Endpoint(), c, "kept")
		if got := tableNames(t, s.Endpoint(), LocalCredentials); len(got) != 0 {
			t.Fatalf("the local key sees %v of the private database", got)
		}
		_ = s.Close()
		if fi, err := os.Stat(filepath.Join(dir, keyFile)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v, mode %v, want 0600", err, fi.Mode())
		}
		s2 := startOrSkip(t, Options{Private: true, DBPath: dir})
		if s2.Credentials() != c {
			t.Fatal("a restart changed the credentials")
		}
		if got := tableNames(t, s2.Endpoint(), c); len(got) != 1 || got[0] != "kept" {
			t.Fatalf("after a restart the own key sees %v, want [kept]", got)
		}
	})
	t.Run("older shared data directory", func(t *testing.T) {
		dir := t.TempDir()
		old := startOrSkip(t, Options{DBPath: dir}) // -sharedDb, the fixed key
		createTable(t, old.Endpoint(), LocalCredentials, "before")
		_ = old.Close()
		s := startOrSkip(t, Options{Private: true, DBPath: dir})
		if got := tableNames(t, s.Endpoint(), s.Credentials()); len(got) != 1 || got[0] != "before" {
			t.Fatalf("the private server sees %v, want the shared database's [before]", got)
		}
		if got := tableNames(t, s.Endpoint(), LocalCredentials); len(got) != 0 {
			t.Fatalf("after the move the local key still sees %v", got)
		}
	})
}

// TestNoBrowserAccess: a web page cannot call DynamoDB Local, which listens on every
// interface: the preflight a DynamoDB request needs (its X-Amz-Target header and JSON
// content type) is answered without Access-Control-Allow-Origin for any page's origin,
// so the browser never sends the request. docs/security.md relies on it; a jar that
// starts allowing origins fails here.
func TestNoBrowserAccess(t *testing.T) {
	s := startOrSkip(t, Options{Private: true})
	for _, origin := range []string{"http://attacker.example", "http://127.0.0.1:3001", "null"} {
		req, err := http.NewRequest(http.MethodOptions, s.Endpoint()+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "content-type,x-amz-target,authorization")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got == "*" || got == origin {
			t.Errorf("preflight from %s: Access-Control-Allow-Origin %q: a page there may call DynamoDB Local", origin, got)
		}
	}
}

// TestDataKeyOfAnotherUser: a second user of the machine cannot make terret dev use a
// key of theirs (and so read everything the developer stores, the profile's stdio MCP
// command included): a key file they planted in a data directory they can write, a
// symlink to one, or a file of theirs is refused, never adopted; a key file that is
// ours is created 0600 and read back.
func TestDataKeyOfAnotherUser(t *testing.T) {
	other := osusertest.New(t)
	const planted = "TLATTACKERKEY SECRETOFTHEIRS\n"
	theirKey := filepath.Join(osusertest.SharedDir(t), "key")
	if out, err := other.Sh(t, "/", "printf '"+strings.TrimSpace(planted)+"\\n' > "+theirKey+" && chmod 600 "+theirKey); err != nil {
		t.Fatalf("plant as %s: %v: %s", other.Name, err, out)
	}
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		want error
	}{
		{"planted in a shared directory", func(t *testing.T) string {
			dir := osusertest.SharedDir(t)
			if out, err := other.Sh(t, dir, "cp "+theirKey+" "+keyFile); err != nil {
				t.Fatalf("plant as %s: %v: %s", other.Name, err, out)
			}
			return dir
		}, privatefile.ErrSharedDir},
		{"symlink to theirs", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Symlink(theirKey, filepath.Join(dir, keyFile)); err != nil {
				t.Fatal(err)
			}
			return dir
		}, privatefile.ErrNotOwn},
		{"a file of theirs", func(t *testing.T) string {
			dir := t.TempDir()
			p := filepath.Join(dir, keyFile)
			if err := os.WriteFile(p, []byte(planted), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, other.UID, other.GID); err != nil {
				t.Fatal(err)
			}
			return dir
		}, privatefile.ErrNotOwn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := dataCredentials(tt.dir(t))
			if !errors.Is(err, tt.want) {
				t.Fatalf("dataCredentials = %+v, %v; want %v", c, err, tt.want)
			}
			if c.AccessKey == "TLATTACKERKEY" {
				t.Fatal("adopted the other user's key")
			}
		})
	}
	t.Run("ours", func(t *testing.T) {
		dir := t.TempDir()
		c, err := dataCredentials(dir)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dir, keyFile))
		if err != nil || fi.Mode() != 0o600 {
			t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
		}
		again, err := dataCredentials(dir)
		if err != nil || again != c {
			t.Fatalf("second read: %+v, %v; want %+v", again, err, c)
		}
	})
}

// TestStartRefusesSharedDataDir: a private server will not use a data directory every
// user can write: Start fails before it creates anything there (no lock, no key, no
// database) or starts Java.
func TestStartRefusesSharedDataDir(t *testing.T) {
	dir := osusertest.SharedDir(t)
	s, err := Start(context.Background(), Options{DBPath: dir, Private: true})
	switch {
	case errors.Is(err, ErrNoJava), errors.Is(err, ErrNotInstalled), errors.Is(err, ErrNoRepo):
		skipOrFail(t, err.Error())
	case err == nil:
		s.Close()
		t.Fatal("started on a shared data directory")
	case !errors.Is(err, privatefile.ErrSharedDir):
		t.Fatalf("Start: %v, want ErrSharedDir", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the shared directory now holds %v", entries)
	}
}
