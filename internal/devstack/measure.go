package devstack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/tables"
)

// Measure holds what a measurement of the stack (cmd/bench) needs of it. Its zero value
// changes nothing.
type Measure struct {
	// Clients wraps the AWS config every handler's clients are built from (a metering
	// middleware, say); Stack.AWSConfig is the result.
	Clients func(aws.Config) aws.Config
	// PollerClients wraps the AWS config of the stream pollers' DynamoDB Streams client.
	PollerClients func(aws.Config) aws.Config
	// Wrap wraps every handler the gateway and the pollers invoke, named "connect",
	// "message", "disconnect", "deliver (async)", "runner", "deliver (log stream)" and
	// "deliver (tokens stream)".
	Wrap func(name string, h lambda.Handler) lambda.Handler
	// MaxConcurrency bounds the local gateway's concurrent invocations ($default
	// included); 0 keeps its default (64).
	MaxConcurrency int
	// LogStreamLater creates the log table without its stream: Stack.EnableLogStream
	// adds it, and its poller, once the logs a measurement replays are seeded.
	LogStreamLater bool
}

func (m Measure) wrap(name string, h lambda.Handler) lambda.Handler {
	if m.Wrap == nil {
		return h
	}
	return m.Wrap(name, h)
}

func (m Measure) clients(cfg aws.Config) aws.Config {
	if m.Clients == nil {
		return cfg
	}
	return m.Clients(cfg)
}

// streams is the pollers' DynamoDB Streams client.
func (m Measure) streams(endpoint string, creds dynamolocal.Credentials) *dynamodbstreams.Client {
	if m.PollerClients == nil {
		return dynamolocal.StreamsClientWith(endpoint, creds)
	}
	return dynamodbstreams.NewFromConfig(m.PollerClients(dynamolocal.ConfigWith(creds)), func(o *dynamodbstreams.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// holdLogStream takes the log table's stream out of defs when LogStreamLater is set, and
// returns it for EnableLogStream.
func (m Measure) holdLogStream(defs []tables.Definition) (*types.StreamSpecification, error) {
	if !m.LogStreamLater {
		return nil, nil
	}
	for i, d := range defs {
		if d.LogicalID == "LogTable" && d.Input.StreamSpecification != nil {
			spec := d.Input.StreamSpecification
			defs[i].Input.StreamSpecification = nil
			return spec, nil
		}
	}
	return nil, errors.New("devstack: template.yaml's LogTable has no stream")
}

// splitMappings keeps the log table's mapping for EnableLogStream when the stream comes
// later.
func (s *Stack) splitMappings(ms []eventsource.Mapping) []eventsource.Mapping {
	if s.logStream == nil {
		return ms
	}
	var now []eventsource.Mapping
	for _, m := range ms {
		if m.TableName == s.Tables["LogTable"] {
			s.logMapping = m
			continue
		}
		now = append(now, m)
	}
	return now
}

// EnableLogStream gives the log table the stream template.yaml defines, waits until the
// table is ACTIVE with it, and starts its poller (Measure.LogStreamLater). Seeded logs
// written before do not go through the stream: DynamoDB Local's GetRecords slows down
// with the records in a shard, and on AWS a log written before a reconnect is read from
// the table, not the stream.
func (s *Stack) EnableLogStream(ctx context.Context) error {
	if s.logStream == nil {
		return errors.New("devstack: the log table has its stream already")
	}
	db := dynamolocal.ClientWith(s.DynamoDBEndpoint, s.Credentials)
	name := s.Tables["LogTable"]
	if _, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(name), StreamSpecification: s.logStream}); err != nil {
		return fmt.Errorf("devstack: enable the stream of %s: %w", name, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return err
		}
		if out.Table.TableStatus == types.TableStatusActive && aws.ToString(out.Table.LatestStreamArn) != "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devstack: %s not ACTIVE with a stream after a minute", name)
		}
	}
	var err error
	s.logPoller, err = eventsource.Start(context.WithoutCancel(ctx), db, s.measure.streams(s.DynamoDBEndpoint, s.Credentials), s.Region,
		[]eventsource.Mapping{s.logMapping}, s.pollerOpts)
	return err
}

// EnableWebhooks starts the webhook consumer on the log's stream, which a measurement
// (Measure.LogStreamLater) holds back so that the other figures carry no webhook reads;
// call it after EnableLogStream, before the operations whose webhooks are measured.
func (s *Stack) EnableWebhooks(ctx context.Context) error {
	if s.logPoller == nil || s.webhookHeld.Handler == nil || s.webhookPoller != nil {
		return errors.New("devstack: EnableWebhooks is for a stack whose log stream came later (EnableLogStream), once")
	}
	db := dynamolocal.ClientWith(s.DynamoDBEndpoint, s.Credentials)
	var err error
	s.webhookPoller, err = eventsource.Start(context.WithoutCancel(ctx), db, s.measure.streams(s.DynamoDBEndpoint, s.Credentials), s.Region,
		[]eventsource.Mapping{s.webhookHeld}, s.pollerOpts)
	return err
}
