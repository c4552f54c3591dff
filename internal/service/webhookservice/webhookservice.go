// Package webhookservice builds the webhook function's consumer (and `terret dev`'s):
// the agents' webhooks from their profiles, attempts queued on SQS. It is apart from
// package agentservice so that the functions that build the agent runtime do not link
// the SQS client.
package webhookservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	agentpkg "github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/secret"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/webhook"
	"github.com/terret/terret-ws/internal/webhook/sqsqueue"
)

// Options are what a local stack sets besides the configuration; the zero
// value is the deployed function's.
type Options struct {
	// Default returns the default profile (nil: cfg.AgentProfile, read once).
	Default func() tools.Profile
	// Env resolves the webhooks' secrets (nil: the function's environment and
	// Secrets Manager / SSM through awsCfg; loopback receivers only for a local stack).
	Env *profile.Env
	// Consumer tunes the attempts (tests shorten the backoff).
	Consumer webhook.Options
}

// Consumer builds the webhook function's consumer: the agents' webhooks from the
// default profile merged with each agent's own (the agents table), epochs from the
// log, attempts queued on cfg.WebhookQueueURL (SQS; locally the local queue).
func Consumer(cfg config.Config, awsCfg aws.Config, logger *slog.Logger, o Options) (*webhook.Consumer, error) {
	local := cfg.DynamoDBEndpoint != ""
	def := o.Default
	if def == nil {
		p, err := tools.ParseProfile(cfg.AgentProfile)
		if err != nil {
			return nil, fmt.Errorf("AGENT_PROFILE: %w", err)
		}
		def = func() tools.Profile { return p }
	}
	env := o.Env
	if env == nil {
		env = &profile.Env{
			LookupEnv:     func(name string) (string, bool) { return config.LookupKey(name, false) },
			Secrets:       secret.NewFromConfig(awsCfg),
			LocalWebhooks: local,
		}
	}
	if cfg.WebhookQueueURL == "" {
		return nil, fmt.Errorf("%w: WEBHOOK_QUEUE_URL is not set", config.ErrInvalid)
	}
	sqsClient := sqs.NewFromConfig(awsCfg, func(so *sqs.Options) {
		if local { // the local queue serves SQS's API at its URL's origin
			if u, err := url.Parse(cfg.WebhookQueueURL); err == nil {
				so.BaseEndpoint = aws.String(u.Scheme + "://" + u.Host)
			}
		}
	})
	db := cfg.DynamoDB(awsCfg)
	co := o.Consumer
	co.Addresses.Loopback = env.LocalWebhooks
	hooks := &profileHooks{db: db, table: cfg.AgentsTable, def: def, env: *env}
	return webhook.New(hooks, sessionlog.New(db, cfg.LogTable), sqsqueue.New(sqsClient, cfg.WebhookQueueURL), logger, co), nil
}

// profileHooks is webhook.Hooks over the profiles: one read of the agent's own
// profile (1 read unit) per call.
type profileHooks struct {
	db    agentpkg.DB
	table string
	def   func() tools.Profile
	env   profile.Env
}

func (h *profileHooks) Hooks(ctx context.Context, agentID string, secrets bool) ([]webhook.Hook, error) {
	p := h.def()
	own, err := agentpkg.GetProfile(ctx, h.db, h.table, agentID)
	if err != nil {
		return nil, err
	}
	if own != "" {
		op, err := tools.DecodeProfile([]byte(own))
		if err != nil {
			return nil, fmt.Errorf("%w of %s: %w", webhook.ErrProfile, agentID, err)
		}
		p = p.Merge(op)
	}
	if len(p.Webhooks) == 0 {
		return nil, nil
	}
	hooks, err := profile.Webhooks(ctx, p, h.env, secrets)
	var pe *tools.ProfileError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("%w of %s: %s", webhook.ErrProfile, agentID, pe.Detail())
	}
	return hooks, err
}
