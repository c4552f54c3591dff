// Command disconnect is the $disconnect route: forget the connection; turns go on.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/service"
)

func main() {
	env := service.Boot("disconnect")
	h := service.Socket(env.Config, env.AWS, nil, env.Logger, service.Tuning{})
	lambda.Start(h.Disconnect)
}
