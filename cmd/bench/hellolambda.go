//go:build ignore

// Command hellolambda is the floor of the cold-start figure: the smallest Go Lambda
// function, built and run exactly like the service's functions. The bench builds it by
// file name (go build cmd/bench/hellolambda.go), which the ignore tag keeps out of
// ./... builds.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context, map[string]any) (string, error) { return "hello", nil })
}
