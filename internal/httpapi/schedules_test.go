package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/schedule"
)

// schedules is package schedule's rules over a map: the paths' statuses and bodies are
// what this tests (the store is tested on DynamoDB Local in package schedule).
type schedules struct{ byID map[string]schedule.Schedule }

func (s *schedules) Set(_ context.Context, agentID string, sp schedule.Spec) (schedule.Schedule, error) {
	if agentID == "broken" {
		return schedule.Schedule{}, fmt.Errorf("table throttled")
	}
	sc, err := schedule.Build(sp, schedule.Bounds{MinEvery: time.Second, MaxText: 100}, time.Now())
	if err != nil {
		return schedule.Schedule{}, err
	}
	if len(s.byID) >= 2 {
		return schedule.Schedule{}, fmt.Errorf("%w: the agent has 2 schedules", schedule.ErrQuota)
	}
	s.byID[sc.ID] = sc
	return sc, nil
}

func (s *schedules) List(context.Context, string) ([]schedule.Schedule, error) {
	out := []schedule.Schedule{}
	for _, sc := range s.byID {
		out = append(out, sc)
	}
	return out, nil
}

func (s *schedules) Cancel(_ context.Context, _, id string) error {
	if _, ok := s.byID[id]; !ok {
		return fmt.Errorf("%w: %q", schedule.ErrNotFound, id)
	}
	delete(s.byID, id)
	return nil
}

// TestScheduleStatuses: the schedule paths' statuses and bodies, in order.
func TestScheduleStatuses(t *testing.T) {
	s := New(tokens{"a1", "tok"}, nil)
	s.RouteSchedules(&schedules{byID: map[string]schedule.Schedule{}})
	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"set", "POST", "/agents/a1/schedules", `{"text":"hi","in":"90s","id":"one"}`, 201, `"id":"one"`},
		{"set cron", "POST", "/agents/a1/schedules", `{"text":"hi","cron":"0 9 * * 1-5","tz":"Europe/Paris"}`, 201, `"next_at":"`},
		{"quota", "POST", "/agents/a1/schedules", `{"text":"hi","every":"1h"}`, 400, "too many schedules"},
		{"bad every names the field", "POST", "/agents/a1/schedules", `{"text":"hi","every":"5ms"}`, 400, "every: "},
		{"two kinds", "POST", "/agents/a1/schedules", `{"text":"hi","at":"2030-01-01T00:00:00Z","in":"1m"}`, 400, "in: give exactly one"},
		{"bad tz", "POST", "/agents/a1/schedules", `{"text":"hi","cron":"0 9 * * *","tz":"Nowhere/City"}`, 400, "tz: "},
		{"unknown field", "POST", "/agents/a1/schedules", `{"text":"hi","in":"1m","when":"now"}`, 400, "unknown field"},
		{"not JSON", "POST", "/agents/a1/schedules", `hi`, 400, "not a schedule JSON object"},
		{"too large", "POST", "/agents/a1/schedules", `{"text":"` + strings.Repeat("x", protocol.MaxFrameBytes) + `"}`, 400, "frame limit"},
		{"list", "GET", "/agents/a1/schedules", "", 200, `"schedules":[`},
		{"cancel", "DELETE", "/agents/a1/schedules/one", "", 204, ""},
		{"cancel again", "DELETE", "/agents/a1/schedules/one", "", 404, `"code":"bad_frame"`},
		{"token store failure", "POST", "/agents/broken/schedules", `{"text":"hi","in":"1m"}`, 500, `"code":"internal"`},
		{"no token", "GET", "/agents/a1/schedules", "", 401, "unauthorized"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
		if tt.name != "no token" {
			req.Header.Set("Authorization", "Bearer tok")
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.contains) {
			t.Fatalf("%s: %d %.300s, want %d containing %q", tt.name, rec.Code, rec.Body, tt.status, tt.contains)
		}
		if rec.Code >= 400 {
			var e protocol.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Type != "error" {
				t.Fatalf("%s: body %q is not an error frame", tt.name, rec.Body)
			}
		}
		if tt.status == http.StatusNoContent && rec.Body.Len() != 0 {
			t.Fatalf("%s: 204 with a body %q", tt.name, rec.Body)
		}
	}
}
