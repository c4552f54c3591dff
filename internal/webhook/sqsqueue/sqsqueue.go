// Package sqsqueue is webhook.Queue on an SQS queue: the template's WebhookQueue on
// AWS, the local queue's endpoint (internal/localqueue) locally. It is its own package
// so that the functions that check profiles' webhooks but send none (message, http,
// schedule) do not link the SQS client.
package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/terret/terret-ws/internal/webhook"
)

// ErrQueue is a failed queue operation.
var ErrQueue = errors.New("sqsqueue: queue")

// SQS is the part of the SQS client Queue uses.
type SQS interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var _ SQS = (*sqs.Client)(nil)

// Queue is a webhook.Queue on an SQS queue (on AWS the template's WebhookQueue;
// locally MemQueue's endpoint).
type Queue struct {
	api SQS
	url string
}

var _ webhook.Queue = (*Queue)(nil)

// New returns the Queue at queueURL.
func New(api SQS, queueURL string) *Queue { return &Queue{api: api, url: queueURL} }

// maxSQSBatch is SendMessageBatch's limit on entries.
const maxSQSBatch = 10

// Send enqueues jobs, ten per request. A Job's body is at most an envelope (128 KiB)
// and a few fields, under SQS's 256 KiB message limit.
func (q *Queue) Send(ctx context.Context, jobs []webhook.Job) error {
	for start := 0; start < len(jobs); start += maxSQSBatch {
		chunk := jobs[start:min(start+maxSQSBatch, len(jobs))]
		entries := make([]sqstypes.SendMessageBatchRequestEntry, len(chunk))
		for i, j := range chunk {
			body, err := json.Marshal(j)
			if err != nil {
				return fmt.Errorf("%w: encode job of %s: %v", ErrQueue, j.AgentID, err)
			}
			entries[i] = sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))}
		}
		out, err := q.api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
		if err != nil {
			return fmt.Errorf("%w: send %d jobs: %v", ErrQueue, len(chunk), err)
		}
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return fmt.Errorf("%w: send: %d of %d jobs refused (%s: %s)", ErrQueue, len(out.Failed), len(chunk), aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	return nil
}

// maxVisibility is SQS's longest visibility timeout (12 hours).
const maxVisibility = 12 * time.Hour

// Delay makes the received message visible again after d.
func (q *Queue) Delay(ctx context.Context, receipt string, d time.Duration) error {
	secs := int32(min(d, maxVisibility) / time.Second)
	_, err := q.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(receipt), VisibilityTimeout: secs})
	if err != nil {
		return fmt.Errorf("%w: change visibility: %v", ErrQueue, err)
	}
	return nil
}
