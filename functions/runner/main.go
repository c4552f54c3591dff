// Command runner runs an agent's turn loop. It is invoked asynchronously with
// {"agent_id": "..."} by the message function (inject, cancel, approve, deny) and by
// itself (deadline handover); an error return makes Lambda retry the event.
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
	cfg, err := config.Load("runner")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.AWS(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rt, err := service.Agent(cfg, awsCfg, service.Logger(os.Stdout, cfg.LogLevel))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lambda.Start(rt.HandleRunner)
}
