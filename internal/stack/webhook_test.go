package stack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/webhook"
)

// TestWebhookFunction: the webhook function reads the log's stream through exactly
// the filter the code and terret dev use (webhook.StreamFilter), reports failures per
// record, and ends in the dead-letter queue like deliver; it consumes WebhookQueue
// reporting failures per message; WebhookQueue's redrive gives up after exactly the
// attempts package webhook counts (more than 24 hours of retries), its visibility
// timeout covers the function's, and the dead-letter queue keeps a message longer than
// its source; the give-up alarm counts the very line the consumer logs.
func TestWebhookFunction(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fs := functions(t, s)
	f, ok := fs["WebhookFunction"]
	if !ok {
		t.Fatal("no WebhookFunction")
	}
	evs, err := f.StreamEvents()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := evs["LogStream"]
	if len(evs) != 1 || !ok || e.Stream != "${LogTable.StreamArn}" {
		t.Fatalf("webhook stream events %+v, want LogStream, the log table's stream, only", evs)
	}
	if e.FilterCriteria == nil || len(e.FilterCriteria.Filters) != 1 || e.FilterCriteria.Filters[0].Pattern != webhook.StreamFilter {
		t.Errorf("log stream filter %+v, want exactly webhook.StreamFilter %s", e.FilterCriteria, webhook.StreamFilter)
	}
	if e.StartingPosition != "LATEST" || strings.Join(e.FunctionResponseTypes, ",") != "ReportBatchItemFailures" || !e.BisectBatchOnFunctionError ||
		e.MaximumRetryAttempts == nil || *e.MaximumRetryAttempts > 100 || e.MaximumRecordAgeInSeconds == nil ||
		e.DestinationConfig == nil || e.DestinationConfig.OnFailure.Destination != "${DeadLetterQueue.Arn}" {
		t.Errorf("log stream event %+v: want LATEST, ReportBatchItemFailures, bisection, bounded retries and age, the DeadLetterQueue", e)
	}
	var q struct {
		Queue                          string
		BatchSize                      int
		MaximumBatchingWindowInSeconds *int
		FunctionResponseTypes          []string
	}
	ev := f.Props.Events["Attempts"]
	if err := json.Unmarshal(ev.Properties, &q); err != nil || ev.Type != "SQS" || q.Queue != "${WebhookQueue.Arn}" ||
		strings.Join(q.FunctionResponseTypes, ",") != "ReportBatchItemFailures" || q.BatchSize < 1 || q.BatchSize > 10 {
		t.Errorf("Attempts event %s %s (%v), want SQS on WebhookQueue, ReportBatchItemFailures, at most 10 per batch", ev.Type, ev.Properties, err)
	}
	if len(f.Props.Events) != 2 {
		t.Errorf("webhook event sources %v, want LogStream and Attempts", keys(f.Props.Events))
	}
	var queue struct {
		VisibilityTimeout      int
		MessageRetentionPeriod int
		RedrivePolicy          struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     int    `json:"maxReceiveCount"`
		}
	}
	if err := s.Decode(&queue, "Resources", "WebhookQueue", "Properties"); err != nil {
		t.Fatal(err)
	}
	if queue.RedrivePolicy.DeadLetterTargetArn != "${WebhookDeadLetterQueue.Arn}" || queue.RedrivePolicy.MaxReceiveCount != webhook.DefaultMaxAttempts {
		t.Errorf("WebhookQueue redrive %+v, want WebhookDeadLetterQueue after webhook.DefaultMaxAttempts (%d) receives", queue.RedrivePolicy, webhook.DefaultMaxAttempts)
	}
	span := webhook.RetrySpan(webhook.DefaultMaxAttempts, webhook.DefaultFirstRetry, webhook.DefaultMaxBackoff)
	if span < 24*time.Hour || time.Duration(queue.MessageRetentionPeriod)*time.Second < span+time.Hour {
		t.Errorf("retries span %v, queue retention %d s: want at least 24 h of retries, all within the retention", span, queue.MessageRetentionPeriod)
	}
	if queue.VisibilityTimeout < f.Props.Timeout || time.Duration(f.Props.Timeout)*time.Second < 2*webhook.DefaultAttemptTimeout {
		t.Errorf("visibility %d s, function timeout %d s, attempt timeout %v: Lambda requires visibility >= timeout, and a batch's attempts must fit", queue.VisibilityTimeout, f.Props.Timeout, webhook.DefaultAttemptTimeout)
	}
	var dlq struct{ MessageRetentionPeriod int }
	if err := s.Decode(&dlq, "Resources", "WebhookDeadLetterQueue", "Properties"); err != nil || dlq.MessageRetentionPeriod <= queue.MessageRetentionPeriod {
		t.Errorf("WebhookDeadLetterQueue retention %d s (%v): a moved message keeps its first enqueue time, so want more than WebhookQueue's %d s", dlq.MessageRetentionPeriod, err, queue.MessageRetentionPeriod)
	}
	// The give-up alarm counts the consumer's own line.
	var filter struct {
		LogGroupName, FilterPattern string
		MetricTransformations       []struct{ MetricNamespace, MetricName string }
	}
	if err := s.Decode(&filter, "Resources", "WebhookGiveUpsMetric", "Properties"); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^\{ \$\.msg = "([^"]+)" \}$`).FindStringSubmatch(filter.FilterPattern)
	if filter.LogGroupName != "${WebhookLogGroup}" || m == nil || len(filter.MetricTransformations) != 1 {
		t.Fatalf("WebhookGiveUpsMetric = %+v", filter)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "webhook", "consumer.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `.ErrorContext(ctx, "`+m[1]+`"`) {
		t.Errorf("internal/webhook logs no error %q: the give-up alarm would stay 0", m[1])
	}
	a := alarms(t, s)["WebhookDeadLetterAlarm"]
	if a.MetricName != filter.MetricTransformations[0].MetricName || a.Namespace != filter.MetricTransformations[0].MetricNamespace || a.Statistic != "Sum" ||
		jsonScalar(a.Threshold) != "0" || a.ComparisonOperator != "GreaterThanThreshold" || a.TreatMissingData != "notBreaching" {
		t.Errorf("WebhookDeadLetterAlarm = %+v, want the Sum of the give-ups > 0", a)
	}
}
