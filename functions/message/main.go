// Command message is the $default route: every client frame. subscribe is served by
// delivery; the agent frames go to the runtime.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/service"
)

func main() {
	cfg, err := config.Load("message")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.AWS(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logger := service.Logger(os.Stdout, cfg.LogLevel)
	agent, err := service.Agent(cfg, awsCfg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	h := service.Socket(cfg, awsCfg, agent, logger, service.Tuning{})
	lambda.Start(h.Message)
}
