package socket

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/metrics"
)

// WithMaxObservers sets how many observer connections an agent may have at once (0:
// connections.DefaultMaxObservers); one more supersedes the oldest. It returns s; call
// it before serving.
func (s *Server) WithMaxObservers(n int) *Server {
	s.maxObservers = n
	return s
}

// observe serves the $connect of an observer token: the socket gets its own seat
// (connections.Store.Observe) beside the agent's ownership record, which it never
// touches — the driver is neither superseded nor supersedes it — and is sent hello
// (role observer) by the deliver function, as a driver is. At the bound the oldest
// observer is superseded (closed with superseded, hello first if it never had one).
func (s *Server) observe(ctx context.Context, lg *slog.Logger, agentID, connID, hash string, accepted events.APIGatewayProxyResponse) (events.APIGatewayProxyResponse, error) {
	lg = lg.With("role", connections.RoleObserver)
	if _, err := s.log.Create(ctx, agentID); err != nil {
		return s.connectFailed(ctx, lg, connID, accepted, err)
	}
	superseded, err := s.conns.Observe(ctx, agentID, connID, hash, s.tokens.Condition(agentID, hash).ConditionCheck, s.maxObservers)
	if err != nil {
		return s.connectFailed(ctx, lg, connID, accepted, err)
	}
	if superseded.ConnID != "" {
		lg.Info("superseding the oldest observer", "superseded_connection_id", superseded.ConnID)
	}
	if err := s.out.Welcome(ctx, connections.ObserverSeat(agentID, connID), superseded); err != nil {
		lg.Error("welcome", "error", err)
		internalAnswer()
		return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}, nil
	}
	if uerr := s.tokens.Used(ctx, agentID, hash); uerr != nil {
		lg.Warn("record token use", "error", uerr)
	}
	lg.Info("connected")
	metrics.Add("Connections", metrics.Count, 1)
	return accepted, nil
}
