// Command disconnect is the $disconnect route: forget the connection; turns go on.
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
	cfg, err := config.Load("disconnect")
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
	lambda.Start(h.Disconnect)
}
