package main

import (
	"io"

	"github.com/terret/terret-ws/internal/devstack"
)

// lambdaEmulator is the devstack option of `terret dev --lambda-emulator`: the built
// bootstraps under aws-lambda-rie, at most concurrency environments per function, each
// cold start announced on console.
func lambdaEmulator(on bool, concurrency int, console io.Writer) *devstack.LambdaEmulator {
	if !on {
		return nil
	}
	return &devstack.LambdaEmulator{MaxEnvironments: concurrency, Console: console}
}
