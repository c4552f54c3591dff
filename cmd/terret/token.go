package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/config/useraws"
	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// store finds where the tables are: --dynamodb-endpoint (a running terret dev's
// credentials when it is that instance's DynamoDB Local, else the local ones), the AWS
// account of the default credentials (--region with --connections-table), or the running
// `terret dev`'s state file.
type storeFlags struct {
	endpoint, table, agentsTable, region, addr *string
}

func addStoreFlags(fs *flag.FlagSet, env config.CLIEnv) storeFlags {
	return storeFlags{
		endpoint:    fs.String("dynamodb-endpoint", env.DynamoDBEndpoint, "DynamoDB endpoint of the tables (default: the running terret dev's; env TERRET_DYNAMODB_ENDPOINT)"),
		table:       fs.String("connections-table", "", "connections table name (default: terret dev's; required against AWS)"),
		agentsTable: fs.String("agents-table", "", "agents table name (default: terret dev's; required against AWS)"),
		region:      fs.String("region", "", "AWS region of the deployed tables (with --connections-table, using the default AWS credentials)"),
		addr:        fs.String("addr", "", "the terret dev to use, by its listen address HOST:PORT (needed when several are running)"),
	}
}

type store struct {
	db                       *dynamodb.Client
	connections, agents, log string
}

var errNoDev = errors.New("no running terret dev found: start `terret dev`, or pass --dynamodb-endpoint, or --region with --connections-table for deployed tables")

func (f storeFlags) open(ctx context.Context, env config.CLIEnv) (store, error) {
	switch {
	case *f.endpoint != "":
		st := store{db: dynamolocal.ClientWith(*f.endpoint, endpointCredentials(env, *f.endpoint)), connections: orStr(*f.table, "terret-connections"), agents: orStr(*f.agentsTable, "terret-agents"), log: "terret-log"}
		return st, nil
	case *f.table != "" || *f.region != "":
		if *f.table == "" {
			return store{}, fmt.Errorf("%w: --region needs --connections-table", errUsage)
		}
		awsCfg, err := useraws.Load(ctx)
		if err != nil {
			return store{}, err
		}
		if *f.region != "" {
			awsCfg.Region = *f.region
		}
		return store{db: dynamodb.NewFromConfig(awsCfg), connections: *f.table, agents: *f.agentsTable}, nil
	}
	addr := ""
	if f.addr != nil {
		addr = *f.addr
	}
	s, err := findDev(env, addr, "--addr")
	if err != nil {
		return store{}, err
	}
	return devStore(s), nil
}

// devStore is the store of a running `terret dev`, opened with the credentials its
// DynamoDB Local takes.
func devStore(s devState) store {
	db := dynamolocal.ClientWith(s.DynamoDBEndpoint, devCredentials(s))
	return store{db: db, connections: s.Tables["ConnectionsTable"], agents: s.Tables["AgentsTable"], log: s.Tables["LogTable"]}
}

// devCredentials are the credentials of a dev instance's DynamoDB endpoint.
func devCredentials(s devState) dynamolocal.Credentials {
	if s.AccessKeyID == "" {
		return dynamolocal.LocalCredentials
	}
	return dynamolocal.Credentials{AccessKey: s.AccessKeyID, SecretKey: s.SecretAccessKey}
}

// endpointCredentials are the credentials for a --dynamodb-endpoint: a running terret
// dev's own when the endpoint is the DynamoDB Local it started, else the fixed local ones.
func endpointCredentials(env config.CLIEnv, endpoint string) dynamolocal.Credentials {
	running, _ := devstate.List(env.StateDir)
	for _, r := range running {
		if strings.TrimRight(r.DynamoDBEndpoint, "/") == strings.TrimRight(endpoint, "/") {
			return devCredentials(r)
		}
	}
	return dynamolocal.LocalCredentials
}

const tokenUsage = `usage: terret token create|list|rotate|revoke --agent ID [flags]

  create   print a new bearer token for the agent (one line on stdout);
           --role observer makes one that may read the log and nothing else
  list     the agent's tokens: id, created, expires, last used (never a token)
  rotate   replace the agent's tokens with one new token; live connections that
           presented an old one get unauthorized and are closed
  revoke   the same without a new token

The tokens live in the running terret dev's tables (--addr picks one when several
run), at --dynamodb-endpoint, or in deployed tables (--region, --connections-table).
Run 'terret token create -h' for the flags.
`

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: token needs a subcommand: create, list, rotate or revoke", errUsage)
	}
	sub := args[0]
	switch sub {
	case "create", "list", "rotate", "revoke":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, tokenUsage)
		return flag.ErrHelp
	default:
		return fmt.Errorf("%w: unknown token subcommand %q (create, list, rotate, revoke)", errUsage, sub)
	}
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret token "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "terret token "+sub+" --agent ID [flags]")
	agentID := fs.String("agent", "", "agent id (required)")
	var ttl *time.Duration
	role := new(string)
	if sub == "create" {
		ttl = fs.Duration("ttl", 0, "lifetime of the token, e.g. 24h (default: never expires)")
		role = fs.String("role", auth.RoleDriver, "driver (reads and controls the agent) or observer (reads its log only)")
	}
	sf := addStoreFlags(fs, env)
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *agentID == "" {
		return fmt.Errorf("%w: --agent is required", errUsage)
	}
	if !auth.ValidAgentID(*agentID) {
		return fmt.Errorf("%w: invalid agent id %q: use 1-128 of A-Z a-z 0-9 . _ -", errUsage, *agentID)
	}
	if *role != auth.RoleDriver && *role != auth.RoleObserver && sub == "create" {
		return fmt.Errorf("%w: --role must be driver or observer, got %q", errUsage, *role)
	}
	if ttl != nil && (*ttl < 0 || *ttl > auth.MaxTTL) {
		return fmt.Errorf("%w: --ttl must be between 0 (never expires) and %v, got %v", errUsage, auth.MaxTTL, *ttl)
	}
	st, err := sf.open(ctx, env)
	if err != nil {
		return err
	}
	tokens := auth.New(st.db, st.connections)
	var tok string
	switch sub {
	case "create":
		tok, err = tokens.CreateRole(ctx, *agentID, *ttl, *role)
	case "list":
		var list []auth.TokenInfo
		if list, err = tokens.List(ctx, *agentID); err == nil {
			printTokens(stdout, list)
		}
	case "rotate":
		tok, err = tokens.Rotate(ctx, *agentID)
	case "revoke":
		err = tokens.Revoke(ctx, *agentID)
	}
	if err != nil {
		return err
	}
	if tok != "" {
		fmt.Fprintln(stdout, tok)
	}
	return nil
}

// printTokens writes one line per token: its id, when it was created, when it expires
// and when it last opened a connection, in UTC; never the token or its hash.
func printTokens(w io.Writer, list []auth.TokenInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tEXPIRES\tLAST USED")
	at := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, ti := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ti.ID, at(ti.Created), at(ti.Expires), at(ti.LastUsed))
	}
	_ = tw.Flush()
}
