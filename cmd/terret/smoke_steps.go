package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/config/useraws"
)

// The optional steps of `terret smoke`, run after replay on its last connection, in
// this order: throttles (reads the deployment, touches no socket), model, idle, and
// rotate last, since it leaves the socket closed and the token replaced.
func (s *smoke) optional(ctx context.Context, c func() *client.Client) error {
	if s.stage != nil {
		if err := s.do(ctx, "throttles", func(ctx context.Context) (string, error) {
			return s.stage.describe(ctx)
		}); err != nil {
			return err
		}
	}
	if s.model != "" {
		if err := s.do(ctx, "model", func(ctx context.Context) (string, error) {
			return s.modelTurn(ctx, c())
		}); err != nil {
			return err
		}
	}
	if s.idle > 0 {
		if err := s.doFor(ctx, "idle", s.idle+s.step, func(ctx context.Context) (string, error) {
			return s.quiet(ctx, c())
		}); err != nil {
			return err
		}
	}
	if s.tokens != nil {
		return s.do(ctx, "rotate", func(ctx context.Context) (string, error) {
			return s.rotate(ctx, c())
		})
	}
	return nil
}

// doFor is do with a step timeout of its own (the idle step outlasts --step-timeout).
func (s *smoke) doFor(ctx context.Context, name string, timeout time.Duration, f func(context.Context) (string, error)) error {
	saved := s.step
	s.step = timeout
	defer func() { s.step = saved }()
	return s.do(ctx, name, f)
}

// smokeModelText is the model step's waking text: plain text, so the scripted model
// echoes it and any other model answers it.
const smokeModelText = "terret smoke: reply with the single word ok."

// modelTurn points the agent's main role at s.model, runs a plain-text turn and checks
// it completed with some answer from that model, then points main back at scripted —
// the smoke agent's model (its scripted turn needs it). A set_model the deployment
// refuses (an unknown provider, a spec outside the profile's allowed_models) is
// answered bad_frame before the turn, and fails the step.
func (s *smoke) modelTurn(ctx context.Context, c *client.Client) (string, error) {
	for len(s.notices) > 0 {
		<-s.notices
	}
	if err := c.SetModel(ctx, "main", s.model); err != nil {
		return "", fmt.Errorf("set_model: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.step)
		defer cancel()
		_ = c.SetModel(rctx, "main", "scripted")
	}()
	if err := c.Inject(ctx, smokeModelText, true); err != nil {
		return "", err
	}
	var start, end int64 = -1, -1
	var reply strings.Builder
	for {
		select {
		case ev := <-s.events:
			var p struct{ Status, Reason, Text string }
			_ = json.Unmarshal(ev.Payload, &p)
			switch ev.Type {
			case "turn/start":
				if start < 0 {
					start = ev.Seq
				}
			case "assistant/chunk":
				if start >= 0 {
					reply.WriteString(p.Text)
				}
			case "turn/end":
				if start < 0 {
					continue // an earlier turn's end
				}
				end = ev.Seq
				if p.Status != "completed" {
					return "", fmt.Errorf("the turn on %s ended %s: %s", s.model, p.Status, p.Reason)
				}
				if strings.TrimSpace(reply.String()) == "" {
					return "", fmt.Errorf("the turn on %s completed with no answer", s.model)
				}
				return fmt.Sprintf("%s: seq %d..%d, %d characters of answer", s.model, start, end, reply.Len()), nil
			}
		case n := <-s.notices:
			return "", fmt.Errorf("set_model %s or the turn was refused: %v", s.model, n)
		case <-c.Done():
			return "", fmt.Errorf("connection ended during the model turn: %v", c.Err())
		case <-ctx.Done():
			return "", fmt.Errorf("no turn/end on %s: %w", s.model, ctx.Err())
		}
	}
}

// quiet holds c open for s.idle sending nothing but the client's own keepalives, then
// checks it was never dropped (a drop shows as a reconnect) and still serves a frame
// (the approve probe of the keepalive step). Past 10 minutes this proves the keepalive
// keeps a quiet socket open: on the raw URL against API Gateway's idle timeout, through
// CloudFront against its rule of 10 minutes without a byte from the API to the client,
// which only the keepalive's answer satisfies.
func (s *smoke) quiet(ctx context.Context, c *client.Client) (string, error) {
	drops := s.drops.Load()
	t := time.NewTimer(s.idle)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.Done():
		return "", fmt.Errorf("connection ended while quiet: %v", c.Err())
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if lost := s.drops.Load() - drops; lost > 0 {
		return "", fmt.Errorf("the connection was closed %d time(s) in %s of quiet (keepalive every %s): the keepalive did not keep it open — behind CloudFront, is the keepalive route answered (a route response)?", lost, s.idle, s.keepaliveEvery)
	}
	for len(s.notices) > 0 {
		<-s.notices
	}
	if err := c.Approve(ctx, "smoke-probe-"+randomSuffix()); err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	select {
	case n := <-s.notices:
		var pe *client.ProtocolError
		if !errors.As(n, &pe) || (pe.Code != client.CodeStaleCall && pe.Code != client.CodeUnsupported) {
			return "", fmt.Errorf("the probe after the quiet was answered %v, want stale_call", n)
		}
		if lost := s.drops.Load() - drops; lost > 0 {
			return "", fmt.Errorf("the connection was closed %d time(s) while quiet", lost)
		}
		return fmt.Sprintf("quiet for %s (keepalive every %s), never dropped; the probe was answered %s", s.idle, s.keepaliveEvery, pe.Code), nil
	case <-c.Done():
		return "", fmt.Errorf("connection ended after the quiet: %v", c.Err())
	case <-ctx.Done():
		return "", fmt.Errorf("no answer to the probe after the quiet: %w", ctx.Err())
	}
}

// rotate replaces the agent's tokens with a new one (not printed, not kept) and checks
// the live connection is answered unauthorized and closed, without a reconnect between:
// the revocation path (the connections table's stream, deliver) on the deployment.
func (s *smoke) rotate(ctx context.Context, c *client.Client) (string, error) {
	drops := s.drops.Load()
	start := time.Now()
	if _, err := s.tokens.Rotate(ctx, s.agent); err != nil {
		return "", fmt.Errorf("rotate %s's token: %w", s.agent, err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		return "", fmt.Errorf("the live socket was not closed after the rotation: %w", ctx.Err())
	}
	took := time.Since(start).Round(time.Millisecond)
	if err := c.Err(); !errors.Is(err, client.ErrUnauthorized) {
		return "", fmt.Errorf("the socket ended with %v, want unauthorized", err)
	}
	if lost := s.drops.Load() - drops; lost > 0 {
		return "", fmt.Errorf("the socket dropped before it was told (unauthorized came at a reconnect, not on the live socket)")
	}
	return fmt.Sprintf("the live socket was answered unauthorized and closed %s after the rotation; the agent's new token was not printed: create one with `terret token create` for the next run", took), nil
}

// smokeTokens is the token store --rotate writes: the deployed table (with
// --connections-table, default AWS credentials, --region) or the running terret dev's.
func smokeTokens(ctx context.Context, env config.CLIEnv, table, region, addr string) (*auth.Store, error) {
	if table != "" {
		cfg, err := useraws.Load(ctx)
		if err != nil {
			return nil, err
		}
		if region != "" {
			cfg.Region = region
		}
		return auth.New(dynamodb.NewFromConfig(cfg), table), nil
	}
	dev, err := findDev(env, addr, "--addr")
	if err != nil {
		return nil, fmt.Errorf("%w (against AWS, pass --connections-table and --region)", err)
	}
	st := devStore(dev)
	return auth.New(st.db, st.connections), nil
}

// stageRef names the stage whose throttles --throttles prints.
type stageRef struct{ api, stage, region string }

// executeAPI matches a raw API URL: wss://API.execute-api.REGION.amazonaws.com/STAGE.
var executeAPI = regexp.MustCompile(`^wss?://([a-z0-9]+)\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([A-Za-z0-9_]+)`)

// stageOf reads --throttles: "url" (the --url's own API and stage, an execute-api URL)
// or API_ID/STAGE.
func stageOf(flagValue, socketURL, region string) (*stageRef, error) {
	if flagValue == "url" {
		m := executeAPI.FindStringSubmatch(socketURL)
		if m == nil {
			return nil, fmt.Errorf("%w: --throttles url: %s is no execute-api URL (through CloudFront, give API_ID/STAGE: the stack's WebSocketURL output names both)", errUsage, socketURL)
		}
		return &stageRef{api: m[1], region: orStr(region, m[2]), stage: m[3]}, nil
	}
	api, stage, ok := strings.Cut(flagValue, "/")
	if !ok || !regexp.MustCompile(`^[a-z0-9]+$`).MatchString(api) || !regexp.MustCompile(`^[A-Za-z0-9_]{1,128}$`).MatchString(stage) {
		return nil, fmt.Errorf("%w: --throttles %q: want API_ID/STAGE (e.g. a1b2c3d4e5/prod) or url", errUsage, flagValue)
	}
	return &stageRef{api: api, stage: stage, region: region}, nil
}

// routeThrottle is a stage's route settings as API Gateway's GetStage returns them.
type routeThrottle struct {
	ThrottlingBurstLimit *int     `json:"throttlingBurstLimit"`
	ThrottlingRateLimit  *float64 `json:"throttlingRateLimit"`
}

func (r routeThrottle) String() string {
	rate, burst := "account default", "account default"
	if r.ThrottlingRateLimit != nil {
		rate = fmt.Sprintf("%g/s", *r.ThrottlingRateLimit)
	}
	if r.ThrottlingBurstLimit != nil {
		burst = fmt.Sprint(*r.ThrottlingBurstLimit)
	}
	return rate + " burst " + burst
}

// describe reads the stage with API Gateway's GetStage (GET /v2/apis/API/stages/STAGE,
// signed with the default AWS credentials; AWS_ENDPOINT_URL redirects it, as for every
// SDK client) and prints its default route throttle and each route's own.
// https://docs.aws.amazon.com/apigatewayv2/latest/api-reference/apis-apiid-stages-stagename.html
func (r *stageRef) describe(ctx context.Context) (string, error) {
	cfg, err := useraws.Load(ctx)
	if err != nil {
		return "", err
	}
	if r.region != "" {
		cfg.Region = r.region
	}
	if cfg.Region == "" {
		return "", fmt.Errorf("no region: pass --region")
	}
	base := "https://apigateway." + cfg.Region + ".amazonaws.com"
	if cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "" {
		base = strings.TrimRight(*cfg.BaseEndpoint, "/")
	}
	var stage struct {
		StageName            string                   `json:"stageName"`
		DefaultRouteSettings routeThrottle            `json:"defaultRouteSettings"`
		RouteSettings        map[string]routeThrottle `json:"routeSettings"`
	}
	if err := signedGet(ctx, cfg, base+"/v2/apis/"+url.PathEscape(r.api)+"/stages/"+url.PathEscape(r.stage), &stage); err != nil {
		return "", fmt.Errorf("GetStage %s/%s: %w", r.api, r.stage, err)
	}
	parts := []string{"default " + stage.DefaultRouteSettings.String()}
	routes := make([]string, 0, len(stage.RouteSettings))
	for k := range stage.RouteSettings {
		routes = append(routes, k)
	}
	sort.Strings(routes)
	for _, k := range routes {
		parts = append(parts, k+" "+stage.RouteSettings[k].String())
	}
	return fmt.Sprintf("stage %s of API %s: %s", orStr(stage.StageName, r.stage), r.api, strings.Join(parts, "; ")), nil
}

// signedGet GETs u signed for API Gateway (SigV4, service apigateway) and decodes its
// JSON answer into v; an error status is returned with its body's message.
func signedGet(ctx context.Context, cfg aws.Config, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	empty := sha256.Sum256(nil)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(empty[:]), "apigateway", cfg.Region, time.Now()); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Message string }
		_ = json.Unmarshal(body, &e)
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, orStr(e.Message, strings.TrimSpace(string(body))))
	}
	return json.Unmarshal(body, v)
}
