// Command probe is a Lambda function for the emulator's own tests: its event says how
// to behave, so that a test can hold an invocation open, time it out, crash it or fail
// it, and see which environment (process) served it.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/invokesecret"
)

type event struct {
	Wait    string `json:"wait"`     // GET this URL and return when it answers
	SleepMS int    `json:"sleep_ms"` // then sleep this long
	Exit    bool   `json:"exit"`     // then exit the process mid-invocation
	Fail    string `json:"fail"`     // then return this error
}

type result struct {
	PID int `json:"pid"`
}

func main() {
	if v := os.Getenv("PROBE_FAIL_INIT"); v != "" {
		fmt.Fprintln(os.Stderr, "probe: init refused:", v)
		os.Exit(1)
	}
	// As every function's main does (service.Start): under the emulator, refuse an
	// invocation without the run's secret.
	lambda.Start(invokesecret.Guard(lambda.NewHandler(func(ctx context.Context, ev event) (result, error) {
		if ev.Wait != "" {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s?pid=%d", ev.Wait, os.Getpid()), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return result{}, err
			}
			resp.Body.Close()
		}
		time.Sleep(time.Duration(ev.SleepMS) * time.Millisecond)
		if ev.Exit {
			os.Exit(3)
		}
		if ev.Fail != "" {
			return result{}, errors.New(ev.Fail)
		}
		return result{PID: os.Getpid()}, nil
	}), os.Getenv(invokesecret.EnvVar)))
}
