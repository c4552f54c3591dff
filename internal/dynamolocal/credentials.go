package dynamolocal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/terret/terret-ws/internal/privatefile"
)

// DynamoDB Local listens on every interface (it has no bind option) and checks no
// signature, but without -sharedDb it keeps one database per access key and region
// (ACCESSKEY_REGION.db). A server started with Options.Private gets an access key of
// its own, 128 random bits: a client from another host, or another program that does
// not know the key, reaches an empty database of its own, never this one. The key is
// therefore the secret (the secret key is random too, but DynamoDB Local ignores it).

// Credentials are the static AWS credentials a client of one DynamoDB Local presents.
type Credentials struct {
	AccessKey string
	SecretKey string
}

// LocalCredentials are the fixed credentials of a server started without
// Options.Private (and of any endpoint given by URL).
var LocalCredentials = Credentials{AccessKey: AccessKey, SecretKey: SecretKey}

// keyFile holds a private data directory's access key, so that a restart opens the
// same database.
const keyFile = ".terret-access-key"

// sharedFile is the database -sharedDb keeps; a data directory written before servers
// were private holds it.
const sharedFile = "shared-local-instance.db"

// randomKey is n random bytes in upper-case hex: DynamoDB Local takes only letters and
// digits in an access key.
func randomKey(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

func newCredentials() Credentials {
	return Credentials{AccessKey: "TL" + randomKey(16), SecretKey: randomKey(20)}
}

// dataCredentials returns the credentials of data directory dir: those stored in its
// key file, or new ones written there. The directory must be private to this user
// (privatefile.CheckDir), and a key file is used only when it is this user's own
// regular file, closed to everyone else: a key another user planted (a file of theirs,
// a symlink) would make this server open their database and hand them ours, so it is
// refused, never adopted. A new key file is created with O_EXCL and mode 0600. A
// directory that holds only the shared database of an older terret dev has it renamed
// to the new key's database, so no data is lost.
func dataCredentials(dir string) (Credentials, error) {
	if err := privatefile.CheckDir(dir); err != nil {
		return Credentials{}, fmt.Errorf("dynamolocal: data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, keyFile)
	b, err := privatefile.Read(path)
	switch {
	case err == nil:
		key, secret, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
		if !ok || key == "" || secret == "" {
			return Credentials{}, fmt.Errorf("dynamolocal: key file %s is malformed: delete it to start a new database", path)
		}
		return Credentials{AccessKey: key, SecretKey: secret}, nil
	case !errors.Is(err, os.ErrNotExist):
		return Credentials{}, fmt.Errorf("dynamolocal: key file %s: %w", path, err)
	}
	c := newCredentials()
	shared := filepath.Join(dir, sharedFile)
	if _, err := os.Stat(shared); err == nil {
		if err := os.Rename(shared, filepath.Join(dir, c.AccessKey+"_"+Region+".db")); err != nil {
			return Credentials{}, fmt.Errorf("dynamolocal: move %s to a private database: %w", shared, err)
		}
	}
	if err := privatefile.Create(path, []byte(c.AccessKey+" "+c.SecretKey+"\n")); err != nil {
		return Credentials{}, fmt.Errorf("dynamolocal: write key file %s: %w", path, err)
	}
	return c, nil
}

// Credentials are what the server's clients must present: its own with
// Options.Private, else LocalCredentials.
func (s *Server) Credentials() Credentials { return s.creds }

// ConfigWith is Config with creds instead of the fixed local credentials.
func ConfigWith(creds Credentials) aws.Config {
	c := Config()
	c.Credentials = credentials.NewStaticCredentialsProvider(creds.AccessKey, creds.SecretKey, "")
	return c
}

// ClientWith is Client with creds.
func ClientWith(endpoint string, creds Credentials) *dynamodb.Client {
	return dynamodb.NewFromConfig(ConfigWith(creds), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(strings.TrimRight(endpoint, "/"))
	})
}

// StreamsClientWith is StreamsClient with creds.
func StreamsClientWith(endpoint string, creds Credentials) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(ConfigWith(creds), func(o *dynamodbstreams.Options) {
		o.BaseEndpoint = aws.String(strings.TrimRight(endpoint, "/"))
	})
}
