// Package sessiondata is what an operator does with an agent's session as a whole:
// export its log, reset it (a new log from seq 0, the runtime state cleared, tokens and
// profile kept) and delete it (everything the service keeps about the agent, except the
// usage counters billing needs). It works on the tables directly with the operator's
// credentials — `terret session` locally and against deployed tables — and reaches
// live connections only through the tables: the deliver function's consumer of the
// connections table's stream closes them (a reset marker on the token item, or the
// token item's removal).
//
// Concurrency: a reset or delete first takes the agent's runner lease (a fence), so no
// runner starts while it works and a running one loses its lease and stops writing;
// it waits out the lease it took over before it erases the log. Every step is
// idempotent, so an interrupted operation is resumed by running it again.
package sessiondata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// API is the part of the DynamoDB client session operations use.
type API interface {
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	BatchWriteItem(context.Context, *dynamodb.BatchWriteItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	// TransactWriteItems: the session log's client (sessionlog.API) appends with it.
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Tables names the three tables of a deployment.
type Tables struct {
	Log, Connections, Agents string
}

// Errors of this package.
var (
	// ErrUnprocessed: DynamoDB kept returning items of a batch unprocessed (throttling)
	// beyond the retries; running the operation again resumes it.
	ErrUnprocessed = errors.New("sessiondata: items left unprocessed")
	// ErrInvalid: a bad argument (an export range).
	ErrInvalid = errors.New("sessiondata: invalid argument")
)

// DefaultRate is the default bound on items a reset or delete removes per second:
// 1,000 write units a second at most (items of 1 KB or less), a small share of an
// on-demand table's throughput, so that erasing a long log never throttles the live
// agents of the same table.
const DefaultRate = 1000

// Options tune a Store. Zero values take the defaults.
type Options struct {
	// Rate bounds the items erased per second (default DefaultRate).
	Rate int
	// Progress gets one line now and then during a long export, reset or delete
	// (stderr in `terret session`); nil writes nothing.
	Progress io.Writer
	// ProgressEvery is how many events an export writes between two progress lines
	// (default 10,000).
	ProgressEvery int
	// Logger logs the steps (default: discard).
	Logger *slog.Logger
	// AfterBatch, if set, is called after each batch of deletes with the number of
	// items erased so far; an error stops the operation (tests interrupt it so).
	AfterBatch func(erased int) error
	// OwnerWait bounds how long a delete waits for the deliver function to close the
	// agent's live connection before it removes the ownership record itself (default
	// 30 s).
	OwnerWait time.Duration
}

// Store runs session operations on one deployment's tables.
type Store struct {
	api API
	t   Tables
	log *sessionlog.Log
	o   Options
	now func() time.Time
}

// New returns a Store over the tables t.
func New(api API, t Tables, o Options) *Store {
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 10000
	}
	if o.OwnerWait <= 0 {
		o.OwnerWait = 30 * time.Second
	}
	return &Store{api: api, t: t, log: sessionlog.New(api, t.Log), o: o, now: time.Now}
}

func (st *Store) progress(format string, args ...any) {
	if st.o.Progress != nil {
		fmt.Fprintf(st.o.Progress, format+"\n", args...)
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
