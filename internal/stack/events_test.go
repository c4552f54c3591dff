package stack

import (
	"bytes"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/webhook"
)

// strictDecode decodes data into v the way a handler receives it and proves the file
// holds nothing v does not carry: unknown fields are refused, and every key of the file
// survives a round trip through v with its exact spelling and value (encoding/json
// matches keys case-insensitively, so DisallowUnknownFields alone would let
// "RequestContext" pass).
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	again, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var orig, round any
	if err := json.Unmarshal(data, &orig); err != nil {
		return err
	}
	if err := json.Unmarshal(again, &round); err != nil {
		return err
	}
	return subset("$", orig, round)
}

// subset reports the first key or value of a that b does not hold identically.
func subset(path string, a, b any) error {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: object became %T", path, b)
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok {
				return fmt.Errorf("%s.%s: key lost in the round trip (misspelt or unknown)", path, k)
			}
			if err := subset(path+"."+k, v, w); err != nil {
				return err
			}
		}
		return nil
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: array changed in the round trip", path)
		}
		for i := range x {
			if err := subset(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); err != nil {
				return err
			}
		}
		return nil
	default:
		if !reflect.DeepEqual(a, b) {
			return fmt.Errorf("%s: %v became %v in the round trip", path, a, b)
		}
		return nil
	}
}

// The sample events every function's handler tests and `sam local invoke -e` take.
var wantEvents = []string{
	"connect.json", "connect-no-auth.json", "disconnect.json",
	"deliver-log-stream.json", "deliver-tokens-stream.json", "deliver-kick.json", "deliver-kick-drop.json",
	"runner.json", "message-bad-frame.json",
	"http-events-page.json", "schedule-fire.json", "webhook-attempt.json",
}

func readEvent(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSampleEvents: every file under events/ is an event exactly as API Gateway,
// DynamoDB Streams or an asynchronous invoker delivers it, decoding strictly into the
// aws-lambda-go (or delivery) type, and tells one consistent story: one API, stage and
// connection of agent-1; a valid frame per message file; log records the session log
// decodes; a token rotation the revocation filter selects.
func TestSampleEvents(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(repoRoot(t), "events")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	want := append([]string(nil), wantEvents...)
	for _, typ := range protocol.ClientTypes() {
		want = append(want, "message-"+typ+".json")
	}
	if !equalSets(files, want) {
		t.Errorf("events/ = %v, want %v", files, sorted(want))
	}

	var connectionIDs []string
	for _, name := range files {
		data := readEvent(t, name)
		switch {
		case strings.HasPrefix(name, "connect"), strings.HasPrefix(name, "message-"), strings.HasPrefix(name, "disconnect"):
			var ev events.APIGatewayWebsocketProxyRequest
			if err := strictDecode(data, &ev); err != nil {
				t.Errorf("%s: not an API Gateway WebSocket event: %v", name, err)
				continue
			}
			checkWebSocketEvent(t, name, ev)
			connectionIDs = append(connectionIDs, ev.RequestContext.ConnectionID)
		case strings.HasSuffix(name, "-stream.json"):
			var ev events.DynamoDBEvent
			if err := strictDecode(data, &ev); err != nil {
				t.Errorf("%s: not a DynamoDB Streams batch: %v", name, err)
				continue
			}
			checkStreamEvent(t, name, ev)
		case strings.HasPrefix(name, "deliver-kick"):
			var k delivery.Kick
			if err := strictDecode(data, &k); err != nil {
				t.Errorf("%s: not a delivery.Kick: %v", name, err)
				continue
			}
			switch k.Kind {
			case delivery.KickPump:
				if !auth.ValidAgentID(k.AgentID) {
					t.Errorf("%s: pump needs a valid agent_id, got %q", name, k.AgentID)
				}
			case delivery.KickDrop:
				if k.ConnectionID == "" || !k.Code.Valid() || !k.Code.Closes() {
					t.Errorf("%s: drop needs a connection_id and a closing code, got %+v", name, k)
				}
				connectionIDs = append(connectionIDs, k.ConnectionID)
			default:
				t.Errorf("%s: kind %q", name, k.Kind)
			}
		case name == "runner.json":
			var r struct {
				AgentID string `json:"agent_id"`
			}
			if err := strictDecode(data, &r); err != nil || !auth.ValidAgentID(r.AgentID) {
				t.Errorf("%s: want {\"agent_id\": VALID_ID}: %v %q", name, err, r.AgentID)
			}
		case name == "http-events-page.json":
			var ev events.LambdaFunctionURLRequest
			if err := strictDecode(data, &ev); err != nil {
				t.Errorf("%s: not a function URL event: %v", name, err)
				continue
			}
			checkFunctionURLEvent(t, name, ev)
		case name == "schedule-fire.json":
			var in schedule.FireInput
			if err := strictDecode(data, &in); err != nil {
				t.Errorf("%s: not a schedule.FireInput: %v", name, err)
				continue
			}
			if _, err := schedule.ParseTime(in.FireAt); err != nil || !auth.ValidAgentID(in.AgentID) || in.ScheduleID == "" {
				t.Errorf("%s: want a valid agent_id, a schedule_id and an RFC 3339 fire_at: %+v (%v)", name, in, err)
			}
		case name == "webhook-attempt.json":
			var ev events.SQSEvent
			if err := strictDecode(data, &ev); err != nil {
				t.Errorf("%s: not an SQS batch: %v", name, err)
				continue
			}
			checkWebhookAttempts(t, name, ev)
		default:
			t.Errorf("%s: no check knows this event", name)
		}
	}
	sort.Strings(connectionIDs)
	if len(connectionIDs) == 0 || connectionIDs[0] != connectionIDs[len(connectionIDs)-1] {
		t.Errorf("the samples should follow one connection, got ids %v", connectionIDs)
	}
}

var urlDomain = regexp.MustCompile(`^([a-z0-9]{32})\.lambda-url\.([a-z]{2}-[a-z]+-\d)\.on\.aws$`)

// checkFunctionURLEvent: a request to the http function's URL as CloudFront forwards
// it (payload 2.0, lower-case header names, the origin header and a bearer token).
func checkFunctionURLEvent(t *testing.T, name string, ev events.LambdaFunctionURLRequest) {
	t.Helper()
	rc := ev.RequestContext
	m := urlDomain.FindStringSubmatch(rc.DomainName)
	if ev.Version != "2.0" || m == nil || m[1] != rc.APIID || rc.DomainPrefix != rc.APIID || ev.Headers["host"] != rc.DomainName {
		t.Errorf("%s: version %q, domainName %q, apiId %q, domainPrefix %q, host %q", name, ev.Version, rc.DomainName, rc.APIID, rc.DomainPrefix, ev.Headers["host"])
	}
	if rc.HTTP.Method == "" || rc.HTTP.Path != ev.RawPath || rc.RequestID == "" || rc.TimeEpoch == 0 || rc.HTTP.SourceIP == "" {
		t.Errorf("%s: incomplete requestContext %+v", name, rc)
	}
	for k := range ev.Headers {
		if k != strings.ToLower(k) {
			t.Errorf("%s: header %q: a function URL event's header names are lower case", name, k)
		}
	}
	if !strings.HasPrefix(auth.BearerToken(ev.Headers["authorization"]), auth.TokenPrefix) || ev.Headers["x-terret-origin"] == "" {
		t.Errorf("%s: want a bearer token and the origin header", name)
	}
}

// checkWebhookAttempts: a batch of the webhook queue, each body a webhook.Job.
func checkWebhookAttempts(t *testing.T, name string, ev events.SQSEvent) {
	t.Helper()
	if len(ev.Records) == 0 {
		t.Fatalf("%s: no records", name)
	}
	for i, m := range ev.Records {
		var job webhook.Job
		if m.EventSource != "aws:sqs" || m.MessageId == "" || m.ReceiptHandle == "" || m.Attributes["ApproximateReceiveCount"] == "" {
			t.Errorf("%s record %d: eventSource %q, messageId, receiptHandle and ApproximateReceiveCount", name, i, m.EventSource)
		}
		if fmt.Sprintf("%x", md5.Sum([]byte(m.Body))) != m.Md5OfBody {
			t.Errorf("%s record %d: md5OfBody is not the body's", name, i)
		}
		if err := json.Unmarshal([]byte(m.Body), &job); err != nil || !auth.ValidAgentID(job.AgentID) || job.URL == "" || job.ID == "" || !json.Valid(job.Body) {
			t.Errorf("%s record %d: body is no webhook.Job: %v", name, i, err)
		}
	}
}

var apiDomain = regexp.MustCompile(`^([a-z0-9]{10})\.execute-api\.([a-z]{2}-[a-z]+-\d)\.amazonaws\.com$`)

func checkWebSocketEvent(t *testing.T, name string, ev events.APIGatewayWebsocketProxyRequest) {
	t.Helper()
	rc := ev.RequestContext
	route, typ := "$default", "MESSAGE"
	switch {
	case strings.HasPrefix(name, "connect"):
		route, typ = "$connect", "CONNECT"
	case strings.HasPrefix(name, "disconnect"):
		route, typ = "$disconnect", "DISCONNECT"
	}
	if rc.RouteKey != route || rc.EventType != typ || rc.MessageDirection != "IN" {
		t.Errorf("%s: routeKey %q eventType %q messageDirection %q, want %s %s IN", name, rc.RouteKey, rc.EventType, rc.MessageDirection, route, typ)
	}
	m := apiDomain.FindStringSubmatch(rc.DomainName)
	if m == nil || m[1] != rc.APIID {
		t.Errorf("%s: domainName %q does not belong to apiId %q", name, rc.DomainName, rc.APIID)
	}
	if rc.Stage != "prod" || rc.ConnectionID == "" || rc.RequestID == "" || rc.ConnectedAt == 0 || rc.RequestTimeEpoch < rc.ConnectedAt || rc.Identity.SourceIP == "" {
		t.Errorf("%s: incomplete requestContext %+v", name, rc)
	}
	for k, v := range ev.Headers {
		if mv := ev.MultiValueHeaders[k]; len(mv) == 0 || strings.Join(mv, ", ") != v {
			t.Errorf("%s: header %s = %q but multiValueHeaders has %q", name, k, v, mv)
		}
	}
	for k, v := range ev.QueryStringParameters {
		if mv := ev.MultiValueQueryStringParameters[k]; len(mv) == 0 || mv[len(mv)-1] != v {
			t.Errorf("%s: query %s = %q but multiValueQueryStringParameters has %q", name, k, v, mv)
		}
	}
	switch typ {
	case "CONNECT":
		if !auth.ValidAgentID(ev.QueryStringParameters["agent_id"]) {
			t.Errorf("%s: queryStringParameters.agent_id = %q", name, ev.QueryStringParameters["agent_id"])
		}
		if ev.Headers["Host"] != rc.DomainName || ev.Headers["Sec-WebSocket-Version"] != "13" || ev.Headers["Sec-WebSocket-Key"] == "" {
			t.Errorf("%s: Host and WebSocket handshake headers", name)
		}
		tok := auth.BearerToken(ev.Headers["Authorization"])
		if name == "connect.json" && !strings.HasPrefix(tok, auth.TokenPrefix) {
			t.Errorf("%s: Authorization = %q, want Bearer %s…", name, ev.Headers["Authorization"], auth.TokenPrefix)
		}
		if name == "connect-no-auth.json" {
			for k := range ev.Headers {
				if strings.EqualFold(k, "Authorization") {
					t.Errorf("%s carries %s", name, k)
				}
			}
		}
	case "MESSAGE":
		if rc.MessageID == nil || rc.MessageID == "" || ev.Body == "" || ev.IsBase64Encoded || len(ev.Headers) > 0 {
			t.Errorf("%s: a MESSAGE event has a messageId and a text body, no headers", name)
		}
		frame, err := protocol.Parse([]byte(ev.Body))
		want := strings.TrimSuffix(strings.TrimPrefix(name, "message-"), ".json")
		if want == "bad-frame" {
			if !errors.Is(err, protocol.ErrBadFrame) {
				t.Errorf("%s: body %s parses (%v), want bad_frame", name, ev.Body, err)
			}
		} else if err != nil || frame.FrameType() != want {
			t.Errorf("%s: body %s: frame %v, err %v; want a valid %s", name, ev.Body, frame, err, want)
		}
	case "DISCONNECT":
		if rc.DisconnectStatusCode == 0 || rc.DisconnectReason == nil {
			t.Errorf("%s: disconnectStatusCode and disconnectReason", name)
		}
	}
}

var streamARN = regexp.MustCompile(`^arn:aws:dynamodb:[a-z0-9-]+:\d{12}:table/([A-Za-z0-9_.-]+)/stream/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}$`)

func checkStreamEvent(t *testing.T, name string, ev events.DynamoDBEvent) {
	t.Helper()
	s := loadStack(t)
	if len(ev.Records) == 0 {
		t.Fatalf("%s: no records", name)
	}
	tokens := name == "deliver-tokens-stream.json"
	table, view := "LogTable", "NEW_IMAGE"
	if tokens {
		table, view = "ConnectionsTable", "NEW_AND_OLD_IMAGES"
	}
	if got := s.String("Resources", table, "Properties", "StreamSpecification", "StreamViewType"); got != view {
		t.Errorf("%s: template's %s stream is %q, the sample %s", name, table, got, view)
	}
	var keyNames []string
	var keySchema []struct{ AttributeName string }
	if err := s.Decode(&keySchema, "Resources", table, "Properties", "KeySchema"); err != nil {
		t.Fatal(err)
	}
	for _, k := range keySchema {
		keyNames = append(keyNames, k.AttributeName)
	}
	for i, r := range ev.Records {
		where := fmt.Sprintf("%s record %d", name, i)
		m := streamARN.FindStringSubmatch(r.EventSourceArn)
		if r.EventSource != "aws:dynamodb" || r.EventVersion != "1.1" || m == nil || !strings.Contains(m[1], table) || r.EventID == "" {
			t.Errorf("%s: eventSource %q eventVersion %q eventSourceARN %q (want the %s stream)", where, r.EventSource, r.EventVersion, r.EventSourceArn, table)
		}
		c := r.Change
		if c.StreamViewType != view || c.SequenceNumber == "" || c.SizeBytes <= 0 || c.ApproximateCreationDateTime.IsZero() {
			t.Errorf("%s: StreamViewType %q SequenceNumber %q SizeBytes %d", where, c.StreamViewType, c.SequenceNumber, c.SizeBytes)
		}
		if !equalSets(keys(c.Keys), keyNames) {
			t.Errorf("%s: Keys %v, want the table's key %v", where, keys(c.Keys), keyNames)
		}
		for k, v := range c.Keys {
			if nv, ok := c.NewImage[k]; !ok || nv.String() != v.String() {
				t.Errorf("%s: key %s differs from NewImage", where, k)
			}
		}
		if got := matchesTokenFilter(r); got != tokens {
			t.Errorf("%s: token filter %s selects it = %v, want %v", where, TokenFilterPattern, got, tokens)
		}
		if tokens {
			if r.EventName != "MODIFY" || c.OldImage == nil {
				t.Errorf("%s: a token rotation is a MODIFY with both images", where)
			}
			if dropped := auth.Dropped(hashKeys(c.OldImage), hashKeys(c.NewImage)); len(dropped) == 0 {
				t.Errorf("%s: the rotation drops no token hash", where)
			}
			continue
		}
		if r.EventName != "INSERT" || c.OldImage != nil {
			t.Errorf("%s: the log only ever inserts, got %s", where, r.EventName)
		}
		e, err := sessionlog.FromImage(c.NewImage)
		if err != nil {
			t.Errorf("%s: the session log cannot decode NewImage: %v", where, err)
			continue
		}
		var payload map[string]any
		if json.Unmarshal(e.Payload, &payload) != nil || e.Type == "" || e.ID == "" {
			t.Errorf("%s: event %+v: payload must be a JSON object", where, e)
		}
	}
}

// matchesTokenFilter applies TokenFilterPattern: the record's Keys.pk.S begins tokens#.
func matchesTokenFilter(r events.DynamoDBEventRecord) bool {
	var pattern struct {
		Dynamodb struct {
			Keys struct {
				Pk struct {
					S []struct {
						Prefix string `json:"prefix"`
					}
				} `json:"pk"`
			}
		} `json:"dynamodb"`
	}
	if err := json.Unmarshal([]byte(TokenFilterPattern), &pattern); err != nil || len(pattern.Dynamodb.Keys.Pk.S) != 1 {
		return false
	}
	pk, ok := r.Change.Keys["pk"]
	return ok && pk.DataType() == events.DataTypeString && strings.HasPrefix(pk.String(), pattern.Dynamodb.Keys.Pk.S[0].Prefix)
}

func hashKeys(img map[string]events.DynamoDBAttributeValue) []string {
	h, ok := img["hashes"]
	if !ok || h.DataType() != events.DataTypeMap {
		return nil
	}
	return keys(h.Map())
}
