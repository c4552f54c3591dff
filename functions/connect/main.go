// Command connect is the $connect route: authenticate, claim the agent, create the session.
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
	cfg, err := config.Load("connect")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.AWS(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	h := service.Socket(cfg, awsCfg, nil, service.Logger(os.Stdout, cfg.LogLevel), service.Tuning{})
	lambda.Start(h.Connect)
}
