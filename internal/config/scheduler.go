package config

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/scheduler"
)

// Scheduler returns an EventBridge Scheduler client (schedules on AWS).
func (c Config) Scheduler(awsCfg aws.Config) *scheduler.Client {
	return scheduler.NewFromConfig(awsCfg)
}
