package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/schedule"
)

// Schedules is what the schedule paths need of package schedule (schedule.Service).
type Schedules interface {
	Set(ctx context.Context, agentID string, sp schedule.Spec) (schedule.Schedule, error)
	List(ctx context.Context, agentID string) ([]schedule.Schedule, error)
	Cancel(ctx context.Context, agentID, id string) error
}

var _ Schedules = (*schedule.Service)(nil)

// maxScheduleBody bounds a schedule's body: its text's bound and room for the rest.
const maxScheduleBody = protocol.MaxFrameBytes

// RouteSchedules serves the schedule paths (docs/protocol.md, "Schedules over HTTP"):
// POST /agents/{agent_id}/schedules (201 and the schedule), GET (the list), DELETE
// …/schedules/{id} (204). A bad spec is 400 bad_frame naming the field; an unknown id
// is 404 with a bad_frame body; an observer's token is 403 forbidden.
func (s *Server) RouteSchedules(sch Schedules) {
	s.RouteDriver("POST /agents/{agent_id}/schedules", func(w http.ResponseWriter, r *http.Request, c Caller) {
		body, err := ReadBody(r, maxScheduleBody)
		if err != nil {
			WriteError(w, protocol.CodeBadFrame, "body over the frame limit or unreadable")
			return
		}
		var sp schedule.Spec
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sp); err != nil {
			WriteError(w, protocol.CodeBadFrame, "schedule: the body is not a schedule JSON object: "+err.Error())
			return
		}
		sc, err := sch.Set(r.Context(), c.AgentID, sp)
		if err != nil {
			s.scheduleError(w, r, c, err)
			return
		}
		WriteJSON(w, http.StatusCreated, sc)
	})
	s.RouteDriver("GET /agents/{agent_id}/schedules", func(w http.ResponseWriter, r *http.Request, c Caller) {
		list, err := sch.List(r.Context(), c.AgentID)
		if err != nil {
			s.scheduleError(w, r, c, err)
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"schedules": list})
	})
	s.RouteDriver("DELETE /agents/{agent_id}/schedules/{id}", func(w http.ResponseWriter, r *http.Request, c Caller) {
		if err := sch.Cancel(r.Context(), c.AgentID, r.PathValue("id")); err != nil {
			s.scheduleError(w, r, c, err)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	})
}

func (s *Server) scheduleError(w http.ResponseWriter, r *http.Request, c Caller, err error) {
	var se *schedule.SpecError
	switch {
	case errors.As(err, &se):
		WriteError(w, protocol.CodeBadFrame, "schedule: "+se.Error())
	case errors.Is(err, schedule.ErrQuota):
		WriteError(w, protocol.CodeBadFrame, err.Error())
	case errors.Is(err, schedule.ErrNotFound):
		WriteJSON(w, http.StatusNotFound, protocol.NewError(protocol.CodeBadFrame, err.Error()))
	default:
		s.log.ErrorContext(r.Context(), "schedules", "agent_id", c.AgentID, "method", r.Method, "error", err)
		WriteError(w, protocol.CodeInternal, "internal error")
	}
}
