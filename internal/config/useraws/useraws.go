// Package useraws loads the AWS configuration of a person at a terminal — `terret` and
// `terret dev` — the SDK's default way: environment, shared config and credentials
// files, SSO, assumed roles, instance metadata. The deployed functions read theirs from
// Lambda's environment instead (config.LambdaAWS): this package is apart from
// internal/config so that they do not carry those credential providers.
package useraws

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Load loads the AWS configuration (credentials, region) the default way.
func Load(ctx context.Context) (aws.Config, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("useraws: load aws config: %w", err)
	}
	return cfg, nil
}
