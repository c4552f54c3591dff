// Command terret is terret-ws's command line: `terret dev` runs the whole service
// locally; `terret token` issues, rotates and revokes agents' bearer tokens; `terret
// agent` stores agents' own profiles.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/terret/terret-ws/internal/termtext"
)

const usage = `usage: terret <command> [flags]

commands:
  dev                          run the whole service locally until interrupted
  token create --agent ID      print a new bearer token for agent ID (--ttl 24h: it expires)
  token list --agent ID        list the agent's tokens: id, created, expires, last used
  token rotate --agent ID      replace the agent's tokens with one new token
  token revoke --agent ID      drop every token of the agent
  agent put --agent ID --profile FILE
                               store FILE as the agent's own profile (checked first)
  agent get --agent ID         print the agent's stored profile
  agent list                   list the agents with a stored profile
  agent delete --agent ID      drop the agent's stored profile
  agent quota --agent ID [--turns-per-day N] [--tokens-per-month N]
                               set or show the agent's own quotas
  usage --agent ID             print the agent's metered usage
  chat --agent ID              talk with the agent in the terminal
  tail --agent ID [--from N]   print the agent's events as JSON lines, following live
  send --agent ID '<frame JSON>' [--idempotency-key K]
                               post one control frame over HTTP; prints its client_id
  smoke [--url URL --token T]  connect, subscribe, run a turn with a tool call,
                               reconnect and replay; each step with its latency
  session export --agent ID [--from SEQ] [--to SEQ]
                               print the agent's log as JSON lines, as subscribers get it
  session reset --agent ID     start the session over from seq 0 (tokens, profile kept)
  session delete --agent ID    erase everything kept about the agent
  schedule set|list|cancel --agent ID
                               wake the agent at a time, every interval or on a cron

Run 'terret <command> -h' for a command's flags, 'terret --version' for the version.
`

// errUsage marks a command-line mistake: exit status 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "dev":
		// `terret dev | tee log`, then Ctrl-C: tee dies with terret dev, and a write to
		// the closed pipe must not kill terret dev on its way out (SIGPIPE), before it
		// stops DynamoDB Local and removes its instance record. Asked for, SIGPIPE turns
		// such writes into EPIPE errors, which the console's writes ignore; a child
		// process starts with SIGPIPE's default, as a caught signal is reset at exec.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		err = runDev(ctx, args[1:], stdout, stderr)
	case "token":
		err = runToken(ctx, args[1:], stdout, stderr)
	case "usage":
		err = runUsage(ctx, args[1:], stdout, stderr)
	case "chat":
		err = runChat(ctx, args[1:], stdout, stderr)
	case "tail":
		err = runTail(ctx, args[1:], stdout, stderr)
	case "send":
		err = runSend(ctx, args[1:], stdout, stderr)
	case "agent":
		err = runAgent(ctx, args[1:], stdout, stderr)
	case "smoke":
		err = runSmoke(ctx, args[1:], stdout, stderr)
	case "session":
		err = runSession(ctx, args[1:], stdout, stderr)
	case "schedule":
		err = runSchedule(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version())
		return 0
	default:
		fmt.Fprintf(stderr, "terret: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		// errUsage marks the error; its own text ("usage") would only repeat the command.
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		fmt.Fprintf(stderr, "terret %s: %s\n", args[0], termtext.Text(msg))
		return 2
	default:
		// An error may quote a server's close reason or a profile's text: escaped.
		fmt.Fprintf(stderr, "terret %s: %s\n", args[0], termtext.Text(err.Error()))
		return 1
	}
}

// setUsage makes fs's -h print a synopsis line before the flags.
func setUsage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
}
