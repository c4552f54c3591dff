// Package dynamoerr recognises DynamoDB's refusals of a conditional write: the one place
// in the module that unwraps ConditionalCheckFailedException and
// TransactionCanceledException. Each function looks through any wrapping (errors.As),
// so callers may test the error as the SDK returns it or as a layer wrapped it.
package dynamoerr

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// condFailedCode is a transaction's cancellation reason for an item whose condition
// did not hold.
const condFailedCode = "ConditionalCheckFailed"

// CondFailed reports whether err is DynamoDB refusing a single-item write because its
// condition did not hold. Such a refusal costs a write unit all the same.
func CondFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// CondFailedItem is CondFailed with the item as it stood when the condition failed: set
// when the request asked for it (ReturnValuesOnConditionCheckFailure ALL_OLD) and the
// item existed, nil otherwise.
func CondFailedItem(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// TxCanceled reports whether err is DynamoDB cancelling a transaction, for whatever
// reason: a condition, a conflict with another transaction, throttling.
func TxCanceled(err error) bool {
	var tce *types.TransactionCanceledException
	return errors.As(err, &tce)
}

// TxCondFailed reports whether err is a cancelled transaction in which the condition of
// the i-th item (0-based, in the request's order) did not hold.
func TxCondFailed(err error, i int) bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || i < 0 || i >= len(tce.CancellationReasons) {
		return false
	}
	return aws.ToString(tce.CancellationReasons[i].Code) == condFailedCode
}

// TxCondFailedItem is TxCondFailed with the i-th item as it stood when its condition
// failed: set when that item of the request asked for it
// (ReturnValuesOnConditionCheckFailure ALL_OLD) and the item existed, nil otherwise.
func TxCondFailedItem(err error, i int) (map[string]types.AttributeValue, bool) {
	if !TxCondFailed(err, i) {
		return nil, false
	}
	var tce *types.TransactionCanceledException
	errors.As(err, &tce)
	return tce.CancellationReasons[i].Item, true
}

// TxConflict reports whether err is a cancelled transaction none of whose conditions
// failed but which met another request on one of its items (TransactionConflict):
// nothing was written, and trying again may succeed.
func TxConflict(err error) bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return false
	}
	conflict := false
	for _, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case condFailedCode:
			return false
		case "TransactionConflict":
			conflict = true
		}
	}
	return conflict
}
