package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/gatewaytest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/webui"
)

// forgedBatch is a DynamoDB stream batch of the log table that puts an assistant/chunk
// with text at seq 1 of session: what a page posted to the deliver function to inject
// events into a victim's live stream.
func forgedBatch(session, text string) string {
	payload, _ := json.Marshal(map[string]string{"text": text})
	rec := map[string]any{"Records": []any{map[string]any{
		"eventID": "1", "eventName": "INSERT", "eventSource": "aws:dynamodb",
		"dynamodb": map[string]any{
			"SequenceNumber": "100000000000000000001",
			"Keys":           map[string]any{"session_id": map[string]string{"S": session}, "seq": map[string]string{"N": "1"}},
			"NewImage": map[string]any{
				"session_id": map[string]string{"S": session}, "seq": map[string]string{"N": "1"},
				"id": map[string]string{"S": "forged-" + text}, "at": map[string]string{"S": "2026-12-01T00:00:00.000000Z"},
				"type": map[string]string{"S": "assistant/chunk"}, "payload": map[string]string{"S": string(payload)},
			},
		},
	}}}
	b, _ := json.Marshal(rec)
	return string(b)
}

// attackPage is a page of another origin that posts the forged batch to every door it
// might find — the Invoke API at the sockets' address, the internal listener's (its
// port given away) without the secret — as CORS simple requests, then sets its title.
func attackPage(targets []map[string]string) string {
	// json.Marshal escapes <, > and &: the JSON is safe inside a script element.
	t, _ := json.Marshal(targets)
	return `<!doctype html><title>attack</title><script id="t" type="application/json">` + string(t) + `</script>
<script>
(async () => {
  const targets = JSON.parse(document.getElementById('t').textContent);
  const results = [];
  for (const t of targets) {
    try {
      const r = await fetch(t.url, {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: t.body});
      results.push(t.name + ': ' + r.type);
    } catch (e) {
      results.push(t.name + ': ' + e.message);
    }
  }
  window.results = results;
  document.title = 'done';
})();
</script>`
}

// TestBrowserCannotForgeEvents: a page served from another origin posts a forged
// stream batch (text/plain, no preflight) to the Invoke API where it used to be served
// — the sockets' address — and to the internal listener without its secret. The victim,
// subscribed and live, receives nothing forged: the first frame after its replay is the
// same batch invoked afterwards through the handlers' own endpoint, which proves the
// batch would have been delivered had the page got through.
func TestBrowserCannotForgeEvents(t *testing.T) {
	t.Parallel()
	node, dir := webTests(t)
	endpoint := dynamotest.Endpoint(t)
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		DynamoDBEndpoint: endpoint,
		Addr:             "127.0.0.1:0",
		TablePrefix:      dynamotest.UniqueName("f") + "-",
		Pages:            webui.Handler(webui.Options{}),
		Logger:           service.Logger(&syncWriter{w: &logs}, "warn"),
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	agent := dynamotest.UniqueName("victim-")
	tok, err := auth.New(dynamolocal.Client(endpoint), st.Tables["ConnectionsTable"]).Create(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	victim, _, err := gatewaytest.Open(ctx, st.WebSocketURL()+"/agents/"+agent+"/ws", tok, nil, 1000)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { victim.Conn.CloseNow() })
	next := func() map[string]any {
		t.Helper()
		b, err := victim.Next(hang.Bound())
		if err != nil {
			t.Fatalf("victim: %v", err)
		}
		var f map[string]any
		_ = json.Unmarshal(b, &f)
		f["raw"] = string(b)
		return f
	}
	if f := next(); f["type"] != "hello" {
		t.Fatalf("first frame %v, want hello", f["raw"])
	}
	if err := victim.Conn.Write(ctx, 1, []byte(`{"type":"subscribe","from_seq":0}`)); err != nil {
		t.Fatal(err)
	}
	if f := next(); f["seq"] != float64(0) {
		t.Fatalf("replay %v, want seq 0", f["raw"])
	}

	public := "http://" + strings.TrimPrefix(st.WebSocketURL(), "ws://")
	internal, err := url.Parse(st.Config.LambdaEndpoint)
	if err != nil {
		t.Fatal(err)
	}
	invoke := "/2015-03-31/functions/deliver/invocations"
	batch := forgedBatch(agent, "forged by a page")
	page := attackPage([]map[string]string{
		{"name": "invoke at the sockets' address", "url": public + invoke, "body": batch},
		{"name": "invoke at the internal port", "url": "http://" + internal.Host + invoke, "body": batch},
		{"name": "post at the sockets' address", "url": public + "/local/@connections/x", "body": batch},
	})
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, page)
	}))
	t.Cleanup(attacker.Close)

	run, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, node, filepath.Join(dir, "forgery.test.mjs"), attacker.URL+"/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("browser run failed (%v):\n%s\nservice logs:\n%s", err, out, logs.String())
	}
	t.Logf("the page's requests:\n%s", bytes.TrimSpace(out))

	// The control: the same batch through the handlers' endpoint is delivered.
	lc := awslambda.NewFromConfig(st.AWSConfig, func(o *awslambda.Options) { o.BaseEndpoint = aws.String(st.Config.LambdaEndpoint) })
	res, err := lc.Invoke(ctx, &awslambda.InvokeInput{FunctionName: aws.String("deliver"), Payload: []byte(forgedBatch(agent, "control"))})
	if err != nil || res.FunctionError != nil {
		t.Fatalf("control Invoke: %v %s", err, res.Payload)
	}
	f := next()
	if !strings.Contains(f["raw"].(string), `"control"`) {
		t.Fatalf("the victim's first live frame is %s, want the control's (the page's forgery got through)", f["raw"])
	}
}
