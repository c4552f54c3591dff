package stack

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated files (LocalStack hook, docs/deploy.md grant table) instead of comparing")

const (
	lambdaARN     = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:"
	executeAPIARN = "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${WebSocketApi}/${Stage}/"
)

// The action sets per table. The log is append-only: nobody may update or delete an
// event, but for the runner's expires_at (logExpiry).
var (
	logWriter   = []string{"dynamodb:PutItem", "dynamodb:Query"}
	logReader   = []string{"dynamodb:Query"}
	connections = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"}
	agents      = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem", "dynamodb:Query"}

	// The connections table's items by pk prefix (docs/architecture.md): connections,
	// ownership records, replay slots, token hashes ("tokens#"), the tokens' last use
	// ("tokuse#"), the expiry sweep's buckets ("tokexp#") and refused connections'
	// departures ("gone#", below). connect reads a token's
	// hash and expiry; deliver's sweep removes expired hashes (only those attributes).
	// Observers: each observer connection's seat ("obs#") and an agent's observer index
	// ("observers#") go with the ownership record wherever it goes (docs/architecture.md,
	// "Observers"); connect reads a token's role ("role#<hash>") with its hash.
	connsOwners      = tableGrant{"ConnectionsTable", connections, []string{"conn#*", "agent#*", "obs#*", "observers#*"}, nil}
	connsOwnersSlots = tableGrant{"ConnectionsTable", connections, []string{"conn#*", "agent#*", "slot#*", "obs#*", "observers#*"}, nil}
	tokenAttrs       = []string{"pk", "hashes", "exp_*"}
	replaySlots      = tableGrant{"ConnectionsTable", []string{"dynamodb:BatchGetItem", "dynamodb:UpdateItem"}, []string{"slot#*"}, nil}
	tokenRead        = tableGrant{"ConnectionsTable", []string{"dynamodb:GetItem"}, []string{"tokens#*"}, append(tokenAttrs[:3:3], "role#*")}
	tokenCheck       = tableGrant{"ConnectionsTable", []string{"dynamodb:ConditionCheckItem"}, []string{"tokens#*"}, nil}
	tokenUse         = tableGrant{"ConnectionsTable", []string{"dynamodb:UpdateItem"}, []string{"tokuse#*"}, nil}
	sweepRead        = tableGrant{"ConnectionsTable", []string{"dynamodb:GetItem"}, []string{"tokens#*"}, nil}
	sweepWrite       = tableGrant{"ConnectionsTable", []string{"dynamodb:UpdateItem"}, []string{"tokens#*"}, tokenAttrs}
	// Retention: the runner sets expires_at on events its checkpoint has passed, and
	// no other attribute of the log (docs/architecture.md, "Retention").
	logExpiry    = tableGrant{"LogTable", []string{"dynamodb:UpdateItem"}, nil, []string{"session_id", "seq", "expires_at"}}
	sweepBuckets = tableGrant{"ConnectionsTable", []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}, []string{"tokexp#*"}, nil}
	// A refused connection's departure ("gone#"): disconnect writes it, deliver reads
	// it; nobody else reaches it, and neither may do more.
	departWrite = tableGrant{"ConnectionsTable", []string{"dynamodb:PutItem"}, []string{"gone#*"}, nil}
	departRead  = tableGrant{"ConnectionsTable", []string{"dynamodb:GetItem"}, []string{"gone#*"}, nil}
	// connect's claim names the owner connection on the agent's state item, and
	// touches no other attribute of the agents table (docs/security.md, "Parked frames").
	ownerClaim = tableGrant{"AgentsTable", []string{"dynamodb:UpdateItem"}, []string{"agent#*"}, []string{"pk", "sk", "conn"}}

	wantTableGrants = map[string][]tableGrant{
		"ConnectFunction":    {{"LogTable", logWriter, nil, nil}, connsOwners, tokenRead, tokenCheck, tokenUse, ownerClaim},
		"MessageFunction":    {{"LogTable", logWriter, nil, nil}, connsOwnersSlots, {"AgentsTable", agents, nil, nil}},
		"DisconnectFunction": {connsOwners, departWrite},
		"DeliverFunction":    {{"LogTable", logReader, nil, nil}, connsOwnersSlots, sweepRead, sweepWrite, sweepBuckets, departRead},
		"RunnerFunction":     {{"LogTable", logWriter, nil, nil}, logExpiry, connsOwnersSlots, {"AgentsTable", agents, nil, nil}},
		// The webhook function reads a log's epoch and an agent's own profile, nothing more.
		"WebhookFunction": {{"LogTable", logReader, nil, nil}, webhookProfiles},
		// The agent paths over HTTP: the events path reads the log, checks tokens as
		// connect does and takes replay slots; frames need the message function's
		// grants and an inject's token condition; schedules the runner's.
		"HttpFunction": {{"LogTable", logWriter, nil, nil}, connsOwnersSlots, tokenRead, tokenCheck, {"AgentsTable", agents, nil, nil}},
		// A fire: the schedule's record, the inbox item and the state item in one
		// transaction (no Query: it reads items by key); a refusal's append.
		"ScheduleFunction": {{"LogTable", logWriter, nil, nil}, {"AgentsTable", agentsByKey, nil, nil}},
	}
	agentsByKey = []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"}
	// Schedules: a function with SCHEDULE_GROUP may manage the schedules of the stack's
	// group (the runner: create, update, delete; the schedule function: delete);
	// one with SCHEDULE_ROLE_ARN may pass the scheduler's role, to EventBridge
	// Scheduler only.
	scheduleARN       = "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ScheduleGroup}/*"
	wantScheduleGrant = map[string][]string{
		"RunnerFunction":   {"scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"},
		"HttpFunction":     {"scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"},
		"ScheduleFunction": {"scheduler:DeleteSchedule"},
	}
	webhookProfiles = tableGrant{"AgentsTable", []string{"dynamodb:GetItem"}, []string{"agent#*"}, []string{"pk", "sk", "profile"}}
	// The webhook function enqueues attempts and delays failed ones, on its queue only.
	webhookQueueActions = []string{"sqs:SendMessage", "sqs:ChangeMessageVisibility"}
	// Posting frames and closing connections; reading a connection's details (GET) is
	// not needed by any function.
	manageConnections = []string{
		executeAPIARN + "POST/@connections/*",
		executeAPIARN + "DELETE/@connections/*",
	}
	profileSecretActions = []string{"secretsmanager:GetSecretValue", "ssm:GetParameter"}
	bedrockModels        = []string{
		"arn:${AWS::Partition}:bedrock:*::foundation-model/*",
		"arn:${AWS::Partition}:bedrock:*:${AWS::AccountId}:inference-profile/*",
		"arn:${AWS::Partition}:bedrock:*:${AWS::AccountId}:application-inference-profile/*",
	}
)

// grant is one (resource, actions) pair of a function's inline policy.
type grant struct {
	Resource  string
	Actions   []string
	Condition map[string]map[string]StringList
}

// tableGrant is one DynamoDB statement: the actions on a table, limited to the items
// whose partition key matches one of Prefixes (dynamodb:LeadingKeys; nil: every item)
// and to the attributes Attributes (dynamodb:Attributes; nil: all).
type tableGrant struct {
	Table      string
	Actions    []string
	Prefixes   []string
	Attributes []string
}

func (g tableGrant) String() string {
	return fmt.Sprintf("%s %v keys %v attributes %v", g.Table, sorted(g.Actions), sorted(g.Prefixes), sorted(g.Attributes))
}

// tableGrantOf reads the conditions of a DynamoDB statement. It reports conditions this
// check does not understand, so that none can loosen or tighten a grant unseen.
func tableGrantOf(t *testing.T, fn, table string, g grant) tableGrant {
	t.Helper()
	tg := tableGrant{Table: table, Actions: g.Actions}
	for op, kv := range g.Condition {
		for k, v := range kv {
			switch {
			case op == "ForAllValues:StringLike" && k == "dynamodb:LeadingKeys":
				tg.Prefixes = v
			case op == "ForAllValues:StringLike" && k == "dynamodb:Attributes":
				tg.Attributes = v
			case op == "StringEqualsIfExists" && k == "dynamodb:Select" && strings.Join(v, ",") == "SPECIFIC_ATTRIBUTES":
				// Goes with dynamodb:Attributes: a read must name its attributes.
			default:
				t.Errorf("%s: %s: unexpected condition %s %s %v", fn, table, op, k, v)
			}
		}
	}
	if len(tg.Attributes) > 0 && contains(g.Actions, "dynamodb:GetItem") && !contains(g.Condition["StringEqualsIfExists"]["dynamodb:Select"], "SPECIFIC_ATTRIBUTES") {
		t.Errorf("%s: %s: dynamodb:Attributes without dynamodb:Select SPECIFIC_ATTRIBUTES lets a read fetch every attribute", fn, table)
	}
	return tg
}

// grants flattens f's inline statements into one grant per resource, actions in the
// statement's order. It fails on a statement that is not a plain Allow.
func grants(t *testing.T, f Function) []grant {
	t.Helper()
	var out []grant
	for _, p := range f.Props.Policies {
		for _, st := range p.Statement {
			if st.Effect != "Allow" || len(st.Action) == 0 || len(st.Resource) == 0 {
				t.Errorf("%s: statement %q must Allow listed actions on listed resources", f.LogicalID, st.Sid)
			}
			for _, r := range st.Resource {
				out = append(out, grant{Resource: r, Actions: st.Action, Condition: st.Condition})
			}
		}
	}
	return out
}

// TestGrants: least privilege, derived from each function's environment. A function
// that has a table's variable is granted that table, with the actions of the grant
// table above, and no other table; *_FUNCTION variables come with lambda:InvokeFunction
// on exactly those functions; WS_MANAGEMENT_ENDPOINT comes with
// execute-api:ManageConnections on the @connections API of this API's stage only;
// only the runner calls Bedrock, and only the runner may invoke the tool functions the
// operator lists in ToolFunctionArns. Nothing is granted on "*" and no action is a wildcard.
func TestGrants(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fs := functions(t, s)
	// The one role beside the functions' is the one EventBridge Scheduler assumes
	// (TestSchedulerRole).
	if roles := s.Resources("AWS::IAM::Role"); len(roles) != 1 || roles[0] != "SchedulerRole" || len(s.Resources("AWS::IAM::Policy"))+len(s.Resources("AWS::IAM::ManagedPolicy")) > 0 {
		t.Errorf("IAM roles and policies come from the functions' Policies only, and SchedulerRole; got roles %v", roles)
	}
	for _, f := range fs {
		env, err := s.Environment(f)
		if err != nil {
			t.Fatal(err)
		}
		if f.Metadata["Role"] != nil || s.Get("Resources", f.LogicalID, "Properties", "Role") != nil {
			t.Errorf("%s: Role must not be set: SAM builds each function its own role from Policies", f.LogicalID)
		}
		if got := s.Get("Resources", f.LogicalID, "Properties", "Policies"); len(f.Props.Policies) != 1 {
			t.Errorf("%s: Policies must be one inline policy document, got %v", f.LogicalID, got)
		}
		tablesGot := map[string][]string{}
		var tableGrants []string
		var invokes, manage, bedrock, secrets, queues []string
		var schedules []string
		passes := 0
		for _, g := range grants(t, f) {
			for _, a := range g.Actions {
				if strings.Contains(a, "*") {
					t.Errorf("%s: wildcard action %s", f.LogicalID, a)
				}
			}
			if g.Resource == "*" {
				t.Errorf("%s: grant on * (%v)", f.LogicalID, g.Actions)
				continue
			}
			kind := actionKind(g.Actions)
			switch {
			case kind == "dynamodb":
				table := strings.TrimSuffix(strings.TrimPrefix(g.Resource, "${"), ".Arn}")
				if _, ok := tableVar[table]; !ok || g.Resource != "${"+table+".Arn}" {
					t.Errorf("%s: DynamoDB grant on %q, want a table's ${X.Arn}", f.LogicalID, g.Resource)
					continue
				}
				tg := tableGrantOf(t, f.LogicalID, table, g)
				if tg.String() != logExpiry.String() { // expires_at only: the log stays append-only
					tablesGot[table] = append(tablesGot[table], g.Actions...)
				}
				tableGrants = append(tableGrants, tg.String())
				if table == "ConnectionsTable" && len(tg.Prefixes) == 0 {
					t.Errorf("%s: connections table grant %v without dynamodb:LeadingKeys reaches the token items", f.LogicalID, g.Actions)
				}
				for _, p := range tg.Prefixes {
					if !strings.HasSuffix(p, "#*") || strings.Count(p, "*") != 1 {
						t.Errorf("%s: LeadingKeys pattern %q, want <prefix>#*", f.LogicalID, p)
					}
					// Token items: reads, and one write limited to the hash and expiry
					// attributes (the sweep); never a put or delete of the item.
					writes := contains(g.Actions, "dynamodb:UpdateItem") && equalSets(tg.Attributes, tokenAttrs)
					if p == "tokens#*" && (len(g.Actions) != 1 || g.Actions[0] != "dynamodb:GetItem" && g.Actions[0] != "dynamodb:ConditionCheckItem" && !writes) {
						t.Errorf("%s: %v (attributes %v) on the token items; a function may read them, or update only %v", f.LogicalID, g.Actions, tg.Attributes, tokenAttrs)
					}
				}
				continue
			case strings.Join(g.Actions, ",") == "iam:PassRole":
				_, hasRole := env["SCHEDULE_ROLE_ARN"]
				cond := g.Condition["StringEquals"]["iam:PassedToService"]
				if !hasRole || g.Resource != "${SchedulerRole.Arn}" || len(g.Condition) != 1 || len(g.Condition["StringEquals"]) != 1 || strings.Join(cond, ",") != "scheduler.amazonaws.com" {
					t.Errorf("%s: iam:PassRole on %s with %v; only SchedulerRole, to scheduler.amazonaws.com, by a function with SCHEDULE_ROLE_ARN", f.LogicalID, g.Resource, g.Condition)
				}
				passes++
			case len(g.Condition) > 0:
				t.Errorf("%s: condition on a non-DynamoDB grant %v", f.LogicalID, g.Actions)
			case strings.HasPrefix(g.Actions[0], "scheduler:"):
				if g.Resource != scheduleARN {
					t.Errorf("%s: %v on %s, want the stack group's schedules %s", f.LogicalID, g.Actions, g.Resource, scheduleARN)
				}
				schedules = append(schedules, g.Actions...)
			case kind == "lambda:InvokeFunction":
				invokes = append(invokes, g.Resource)
			case kind == "execute-api:ManageConnections":
				manage = append(manage, g.Resource)
			case kind == "bedrock:InvokeModelWithResponseStream":
				bedrock = append(bedrock, g.Resource)
			case equalSets(g.Actions, profileSecretActions):
				secrets = append(secrets, g.Resource)
			case equalSets(g.Actions, webhookQueueActions):
				queues = append(queues, g.Resource)
			default:
				t.Errorf("%s: unexpected grant %v on %s", f.LogicalID, g.Actions, g.Resource)
			}
		}
		if _, hasGroup := env["SCHEDULE_GROUP"]; !equalSets(schedules, wantScheduleGrant[f.LogicalID]) || hasGroup != (len(schedules) > 0) {
			t.Errorf("%s: scheduler actions %v, want %v (and only with SCHEDULE_GROUP)", f.LogicalID, schedules, wantScheduleGrant[f.LogicalID])
		}
		if _, hasRole := env["SCHEDULE_ROLE_ARN"]; hasRole != (passes == 1) {
			t.Errorf("%s: %d iam:PassRole grants with SCHEDULE_ROLE_ARN set = %v", f.LogicalID, passes, hasRole)
		}
		for table, v := range tableVar {
			_, hasVar := env[v]
			_, granted := tablesGot[table]
			if hasVar != granted {
				t.Errorf("%s: has %s = %v but granted %s = %v: a function touches a table iff it has its variable", f.LogicalID, v, hasVar, table, granted)
			}
		}
		var want []string
		for _, g := range wantTableGrants[f.LogicalID] {
			want = append(want, g.String())
		}
		if !equalSets(tableGrants, want) {
			t.Errorf("%s: DynamoDB grants\n  got  %v\n  want %v", f.LogicalID, sorted(tableGrants), sorted(want))
		}
		if got := tablesGot["LogTable"]; contains(got, "dynamodb:UpdateItem") || contains(got, "dynamodb:DeleteItem") {
			t.Errorf("%s may change the append-only log: %v", f.LogicalID, got)
		}
		var wantInvokes []string
		for v, name := range env {
			if strings.HasSuffix(v, "_FUNCTION") {
				wantInvokes = append(wantInvokes, lambdaARN+name)
			}
		}
		if f.LogicalID == "RunnerFunction" {
			// The agent profile's "lambda" tools: functions the operator names at deploy
			// time (parameter ToolFunctionArns; no statement when it is empty).
			wantInvokes = append(wantInvokes, "${ToolFunctionArns}")
		}
		if !equalSets(invokes, wantInvokes) {
			t.Errorf("%s: lambda:InvokeFunction on %v, want exactly the *_FUNCTION targets %v", f.LogicalID, invokes, wantInvokes)
		}
		_, posts := env["WS_MANAGEMENT_ENDPOINT"]
		if posts && !equalSets(manage, manageConnections) || !posts && len(manage) > 0 {
			t.Errorf("%s: execute-api:ManageConnections on %v, want %v iff WS_MANAGEMENT_ENDPOINT is set (%v)", f.LogicalID, manage, manageConnections, posts)
		}
		// The functions that build the agent runtime (message, runner, and http for
		// frames over HTTP) fetch the profiles' api_key_secret
		// keys at cold start: exactly the secrets the operator lists in ProfileSecretArns.
		// The webhook function fetches the webhooks' secret_secret secrets: exactly
		// WebhookSecretArns, and no provider key.
		if runtime := f.LogicalID == "MessageFunction" || f.LogicalID == "RunnerFunction" || f.LogicalID == "HttpFunction"; runtime && !equalSets(secrets, []string{"${ProfileSecretArns}"}) ||
			f.LogicalID == "WebhookFunction" && !equalSets(secrets, []string{"${WebhookSecretArns}"}) ||
			!runtime && f.LogicalID != "WebhookFunction" && len(secrets) > 0 {
			t.Errorf("%s: profile secrets readable on %v; want ${ProfileSecretArns} for the message, runner and http functions, ${WebhookSecretArns} for webhook, none elsewhere", f.LogicalID, secrets)
		}
		if wh := f.LogicalID == "WebhookFunction"; wh && !equalSets(queues, []string{"${WebhookQueue.Arn}"}) || !wh && len(queues) > 0 {
			t.Errorf("%s: %v on %v; only the webhook function, on WebhookQueue only", f.LogicalID, webhookQueueActions, queues)
		}
		if f.LogicalID == "RunnerFunction" && !equalSets(bedrock, bedrockModels) || f.LogicalID != "RunnerFunction" && len(bedrock) > 0 {
			t.Errorf("%s: Bedrock on %v; only the runner calls models (%v)", f.LogicalID, bedrock, bedrockModels)
		}
	}

	// The grant table of docs/deploy.md is this template's, verbatim.
	table := GrantTable(t, fs)
	path := filepath.Join(repoRoot(t), "docs", "deploy.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- grants:begin (generated by internal/stack: go test ./internal/stack -run TestGrants -update) -->\n", "<!-- grants:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("docs/deploy.md lacks the grant table markers %q … %q", begin, end)
	}
	current := string(doc[i+len(begin) : j])
	if current == table {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(string(doc[:i+len(begin)])+table+string(doc[j:])), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/deploy.md grant table is stale; run go test ./internal/stack -run TestGrants -update\nwant:\n%s\ngot:\n%s", table, current)
}

// GrantTable renders the functions' inline grants as a Markdown table.
func GrantTable(t *testing.T, fs map[string]Function) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("| function | resource | actions | items |\n| --- | --- | --- | --- |\n")
	ids := keys(fs)
	sort.Slice(ids, func(i, j int) bool { return order(ids[i]) < order(ids[j]) })
	for _, id := range ids {
		for _, g := range grants(t, fs[id]) {
			acts := make([]string, len(g.Actions))
			for i, a := range g.Actions {
				acts[i] = "`" + a + "`"
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", fs[id].Name, g.Resource, strings.Join(acts, ", "), itemScope(g))
		}
	}
	return b.String()
}

// order sorts functions in the order a connection meets them.
func order(id string) int {
	for i, f := range []string{"ConnectFunction", "MessageFunction", "DisconnectFunction", "DeliverFunction", "RunnerFunction", "WebhookFunction", "ScheduleFunction"} {
		if f == id {
			return i
		}
	}
	return 99
}

// actionKind is "dynamodb" when every action is a DynamoDB one, the single action when
// all are that one, and "" for a mix.
func actionKind(actions []string) string {
	dynamo := true
	for _, a := range actions {
		dynamo = dynamo && strings.HasPrefix(a, "dynamodb:")
	}
	if dynamo {
		return "dynamodb"
	}
	if len(actions) == 1 {
		return actions[0]
	}
	return ""
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// itemScope renders a grant's DynamoDB conditions for the grant table: the pk patterns
// and, when limited, the attributes; "all" without conditions.
func itemScope(g grant) string {
	keys := g.Condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
	attrs := g.Condition["ForAllValues:StringLike"]["dynamodb:Attributes"]
	if len(keys) == 0 && len(attrs) == 0 {
		return "all"
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, "`"+k+"`")
	}
	var out []string
	if len(parts) > 0 {
		out = append(out, "pk "+strings.Join(parts, ", "))
	}
	if len(attrs) > 0 {
		out = append(out, "attributes "+strings.Join(attrs, ", "))
	}
	return strings.Join(out, "; ")
}
