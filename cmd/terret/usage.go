package main

import (
	"context"
	"fmt"
	"io"
)

func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return fmt.Errorf("usage metering is not available yet")
}
