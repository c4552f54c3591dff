package service

import (
	"context"
	"errors"
	"log/slog"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/socket"
)

// Agent builds the agent runtime: the controller the message route hands agent frames
// to, and the runner function's handler.
func Agent(cfg config.Config, awsCfg aws.Config, logger *slog.Logger) (socket.Controller, lambda.Handler) {
	return nil, lambda.NewHandler(func(ctx context.Context, _ map[string]any) error {
		return errors.New("service: the agent runtime is not mounted")
	})
}
