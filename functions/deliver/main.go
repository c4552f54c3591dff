// Command deliver pushes session logs to sockets: it consumes the log table's stream
// (tail), the connections table's token changes (revocation) and asynchronous kicks
// (hello after $connect, handover of a long replay).
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
	cfg, err := config.Load("deliver")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.AWS(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	d := service.Deliverer(cfg, awsCfg, service.Logger(os.Stdout, cfg.LogLevel), service.Tuning{})
	lambda.Start(d.Handle)
}
