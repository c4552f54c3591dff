package webhook

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
)

// ErrQueue is a failed queue operation.
var ErrQueue = errors.New("webhook: queue")

// SQS is the part of the SQS client SQSQueue uses.
type SQS interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var _ SQS = (*sqs.Client)(nil)

// SQSQueue is a Queue on an SQS queue (on AWS the template's WebhookQueue; locally
// MemQueue's endpoint).
type SQSQueue struct {
	api SQS
	url string
}

// NewSQSQueue returns the Queue at queueURL.
func NewSQSQueue(api SQS, queueURL string) *SQSQueue { return &SQSQueue{api: api, url: queueURL} }

// maxSQSBatch is SendMessageBatch's limit on entries.
const maxSQSBatch = 10

// Send enqueues jobs, ten per request. A Job's body is at most an envelope (128 KiB)
// and a few fields, under SQS's 256 KiB message limit.
func (q *SQSQueue) Send(ctx context.Context, jobs []Job) error {
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
func (q *SQSQueue) Delay(ctx context.Context, receipt string, d time.Duration) error {
	secs := int32(min(d, maxVisibility) / time.Second)
	_, err := q.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(receipt), VisibilityTimeout: secs})
	if err != nil {
		return fmt.Errorf("%w: change visibility: %v", ErrQueue, err)
	}
	return nil
}
