package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/metrics"
)

// SweepInput is the payload of the scheduled invocation of deliver that revokes expired
// tokens (template.yaml, DeliverFunction's TokenSweep event).
const SweepInput = `{"sweep":"tokens"}`

// Tokens returns the token store over cfg's connections table.
func Tokens(cfg config.Config, awsCfg aws.Config) *auth.Store {
	return auth.New(cfg.DynamoDB(awsCfg), cfg.ConnectionsTable)
}

// DeliverHandler serves every invocation of the deliver function: the token sweep
// (SweepInput) with tokens.Sweep, everything else with d.Handle.
func DeliverHandler(d *delivery.Deliverer, tokens *auth.Store, logger *slog.Logger) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		in, err := delivery.DecodeInput(raw)
		if err != nil {
			return nil, err
		}
		if sweep, ok := in.(delivery.SweepInput); ok {
			if sweep.Sweep != "tokens" {
				return nil, fmt.Errorf("service: unknown sweep %q", sweep.Sweep)
			}
			n, err := tokens.Sweep(ctx)
			metrics.Add("TokensExpired", metrics.Count, float64(n))
			if n > 0 {
				logger.Info("expired tokens revoked", "tokens", n)
			}
			return nil, err
		}
		return d.HandleInput(ctx, in)
	}
}
