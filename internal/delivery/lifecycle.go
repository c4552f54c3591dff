package delivery

import (
	"errors"
	"fmt"
)

// The lifecycle of a sender (sender.go), from the Acquire that made it the lease holder
// to finish, as one state machine (docs/architecture.md, "The sender's lifecycle").
// The state changes in one place only, fire, and only as the table lifecycle allows: an
// event the table has no entry for is refused with errTransition and leaves the state
// as it was. run does the step of the state the sender is in (sender.step) until the
// lease is no longer its own.

// senderState is where a sender is in its lifecycle.
type senderState uint8

const (
	// stateGreeting: the lease is held and hello is owed.
	stateGreeting senderState = iota
	// stateSending: the lease is held, hello went out, and the events owed from the
	// cursor are read and posted — a replay (cursor before the record's ReplayEnd) or
	// the live tail; which of the two is a property of the cursor, not of the lifecycle.
	stateSending
	// stateResubscribed: the lease is held, and the record turned out to serve a newer
	// subscription (adopt): the events in hand belong to the old one and are dropped,
	// and the next round reads from the new subscription's cursor.
	stateResubscribed
	// stateLingering: the lease is held, everything owed went out, and a fast-path
	// sender waits up to lingerFor for the appender's next events under the same lease.
	stateLingering
	// stateReleasing: the lease is held, and the sender lets it go, writing the cursor
	// (Store.Release); a Pending mark or a resubscribe found there means looking again.
	stateReleasing

	// From here on the lease is no longer the sender's (holds reports false).

	// stateLetGo: the release took; the next wake-up acquires the lease afresh.
	stateLetGo
	// stateLost: a write under the lease found it held by another sender, or the
	// record gone (connections.ErrLeaseLost).
	stateLost
	// stateHandedOver: out of time; the progress was left on the record (Abandon) and a
	// fresh asynchronous invocation asked to continue (KickPump).
	stateHandedOver
	// stateDisowned: the live tail was found lagging while a post waited (postWatched)
	// and the connection's records closed; the lagged frame and the delete are left.
	stateDisowned
	// stateClosed: the sender closed the connection (lagged, or a reply that closes it);
	// its record and lease went with it.
	stateClosed
	// stateAbandoned: the sender stopped on an error while holding the lease and left
	// its progress on the record for the next sender (finish).
	stateAbandoned

	numStates // the number of states; not a state
)

// holds reports whether the lease is still the sender's in st.
func (st senderState) holds() bool { return st < stateLetGo }

var stateNames = [numStates]string{
	stateGreeting: "greeting", stateSending: "sending", stateResubscribed: "resubscribed",
	stateLingering: "lingering", stateReleasing: "releasing", stateLetGo: "let_go", stateLost: "lost",
	stateHandedOver: "handed_over", stateDisowned: "disowned", stateClosed: "closed", stateAbandoned: "abandoned",
}

func (st senderState) String() string {
	if st < numStates {
		return stateNames[st]
	}
	return fmt.Sprintf("state(%d)", uint8(st))
}

// senderEvent is something that happened to a sender; fire turns it into the next state.
type senderEvent uint8

const (
	// evPost: the sender is about to post a frame of its own (hello, an event, a
	// replay_truncated, a reply). It leaves the state as it is and is refused where
	// nothing may be posted — above all once the lease is no longer the sender's. The
	// frames that close a connection are the closing's (Close, drop, shut), posted after
	// the state has left the lease.
	evPost senderEvent = iota
	// evHelloPosted: hello went out (hello).
	evHelloPosted
	// evResubscribe: a write under the lease returned a record serving a newer
	// subscription (adopt).
	evResubscribe
	// evRound: a round of sending begins (round).
	evRound
	// evLinger: everything owed went out, and the wake-up lets the sender wait for the
	// appender's next events (idle).
	evLinger
	// evRelease: everything owed went out, and there is nothing to wait for (idle).
	evRelease
	// evMore: the appender's next events came while lingering (linger).
	evMore
	// evQuiet: none came within lingerFor (linger).
	evQuiet
	// evLookAgain: the release found a Pending mark or a resubscribe, and kept the lease
	// (release).
	evLookAgain
	// evLetGo: the release took (release).
	evLetGo
	// evLeaseLost: a write under the lease answered connections.ErrLeaseLost (lost,
	// release).
	evLeaseLost
	// evDisown: the live tail went past the bound while a post waited, and the
	// connection's records were closed as lagged (postWatched).
	evDisown
	// evClose: the sender closes the connection (closeLagged, postReplies).
	evClose
	// evHandOver: out of time, the progress left and a fresh invocation asked (handover).
	evHandOver
	// evAbandon: the sender stops holding the lease, its progress left (finish).
	evAbandon

	numEvents // the number of events; not an event
)

var eventNames = [numEvents]string{
	evPost: "post", evHelloPosted: "hello_posted", evResubscribe: "resubscribe", evRound: "round",
	evLinger: "linger", evRelease: "release", evMore: "more", evQuiet: "quiet", evLookAgain: "look_again",
	evLetGo: "let_go", evLeaseLost: "lease_lost", evDisown: "disown", evClose: "close",
	evHandOver: "hand_over", evAbandon: "abandon",
}

func (e senderEvent) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// lifecycle is the transition table: the next state for each event a state accepts.
// Every other pair is refused. A state holding the lease accepts evLeaseLost,
// evHandOver and evAbandon; a state past it accepts nothing but the closing of a
// disowned connection.
var lifecycle = [numStates]map[senderEvent]senderState{
	stateGreeting: {
		evPost:        stateGreeting,
		evResubscribe: stateGreeting, // hello is owed to the connection, whatever it subscribed to
		evHelloPosted: stateSending,
		evLeaseLost:   stateLost, evHandOver: stateHandedOver, evAbandon: stateAbandoned,
	},
	stateSending: {
		evPost:        stateSending,
		evRound:       stateSending,
		evResubscribe: stateResubscribed,
		evLinger:      stateLingering,
		evRelease:     stateReleasing,
		evDisown:      stateDisowned,
		evClose:       stateClosed,
		evLeaseLost:   stateLost, evHandOver: stateHandedOver, evAbandon: stateAbandoned,
	},
	stateResubscribed: {
		evPost:        stateResubscribed, // a replay_truncated owed before the resubscribe was found
		evRound:       stateSending,
		evResubscribe: stateResubscribed,
		evDisown:      stateDisowned,
		evClose:       stateClosed,
		evLeaseLost:   stateLost, evHandOver: stateHandedOver, evAbandon: stateAbandoned,
	},
	stateLingering: {
		evMore:      stateSending,
		evQuiet:     stateReleasing,
		evLeaseLost: stateLost, evHandOver: stateHandedOver, evAbandon: stateAbandoned,
	},
	stateReleasing: {
		evResubscribe: stateResubscribed, // adopted from the cursor write the release joined
		evLookAgain:   stateSending,
		evLetGo:       stateLetGo,
		evLeaseLost:   stateLost, evHandOver: stateHandedOver, evAbandon: stateAbandoned,
	},
	stateDisowned: {
		evClose: stateClosed,
	},
}

// errTransition is an event the sender's state does not accept: a defect of the
// sender, reported, the state left as it was.
var errTransition = errors.New("delivery: sender: no such transition")

// transition returns the state that e leads to from st, or errTransition.
func transition(st senderState, e senderEvent) (senderState, error) {
	if st < numStates {
		if next, ok := lifecycle[st][e]; ok {
			return next, nil
		}
	}
	return st, fmt.Errorf("%w: %s in state %s", errTransition, e, st)
}

// fire is the one place a sender's state changes: to the state the table gives for e,
// or not at all, the refusal returned (and logged: it is a defect).
func (s *sender) fire(e senderEvent) error {
	next, err := transition(s.st, e)
	if err != nil {
		s.lg.ErrorContext(s.ctx, "sender lifecycle", "state", s.st.String(), "event", e.String(), "error", err)
		return err
	}
	s.st = next
	return nil
}
