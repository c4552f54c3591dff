package devstack

import (
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/localqueue"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/service/webhookservice"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/webhook"
)

// webhookQueueVisibility is template.yaml's WebhookQueue VisibilityTimeout.
const webhookQueueVisibility = 90

// startWebhookQueue starts the local stand-in of the template's WebhookQueue and its
// event source mapping, invoking fn (the webhook function).
func startWebhookQueue(fn lambda.Handler, o Options, logger *slog.Logger) (*localqueue.Queue, error) {
	return localqueue.Start(o.Measure.wrap("webhook (queue)", fn), localqueue.Options{
		MaxReceives: cmpOr(o.Webhook.MaxAttempts, webhook.DefaultMaxAttempts),
		Visibility:  webhookQueueVisibility * time.Second,
		Logger:      logger,
	})
}

// bindWebhook binds fn to the in-process webhook consumer: the default profile as
// the runtime serves it, secrets from the environment (.env too) or the user's AWS
// credentials, loopback receivers admitted.
func (st *Stack) bindWebhook(fn interface{ Bind(lambda.Handler) }, awsCfg aws.Config, userAWS aws.Config, prof *defaultProfile, o Options, logger *slog.Logger) error {
	cfg := st.Config
	cfg.WebhookQueueURL = st.webhookQueue.URL()
	def := tools.DefaultProfile
	if prof.src != nil {
		def = prof.src.Default
	}
	env := agentservice.ProfileEnv(userAWS, agentservice.AgentOptions{Local: true})
	c, err := webhookservice.Consumer(cfg, awsCfg, logger, webhookservice.Options{Default: def, Env: &env, Consumer: o.Webhook})
	if err != nil {
		return err
	}
	fn.Bind(perCall(c.Handle))
	return nil
}

// webhookMapping is the webhook function's log stream mapping, as the template's.
func (st *Stack) webhookMapping(fn lambda.Handler, o Options, timeout time.Duration) (eventsource.Mapping, error) {
	f, err := eventsource.ParseFilter(webhook.StreamFilter)
	if err != nil {
		return eventsource.Mapping{}, err
	}
	m := eventsource.Mapping{Function: "webhook", Handler: o.Measure.wrap("webhook (log stream)", fn), TableName: st.Tables["LogTable"],
		BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: timeout, Filters: []eventsource.Filter{f}}
	return m, nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
