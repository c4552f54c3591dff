package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/protocol"
)

func TestParseClientID(t *testing.T) {
	long := strings.Repeat("é", protocol.MaxClientIDChars) // 128 characters, 256 bytes
	tests := []struct {
		name, frame, want, field string
	}{
		{"inject", `{"type":"inject","text":"hi","wake":true,"client_id":"abc"}`, "abc", ""},
		{"cancel", `{"type":"cancel","client_id":"c-1"}`, "c-1", ""},
		{"approve", `{"type":"approve","call_id":"x","client_id":"a"}`, "a", ""},
		{"deny", `{"type":"deny","call_id":"x","client_id":"d"}`, "d", ""},
		{"set_model", `{"type":"set_model","role":"main","spec":"scripted","client_id":"m"}`, "m", ""},
		{"set_policy", `{"type":"set_policy","patterns":[],"client_id":"p"}`, "p", ""},
		{"128 characters", `{"type":"cancel","client_id":"` + long + `"}`, long, ""},
		{"absent", `{"type":"cancel"}`, "", ""},
		{"null is absent", `{"type":"cancel","client_id":null}`, "", ""},
		{"on subscribe: ignored", `{"type":"subscribe","from_seq":0,"client_id":7}`, "", ""},
		{"empty", `{"type":"cancel","client_id":""}`, "", "client_id"},
		{"129 characters", `{"type":"cancel","client_id":"` + long + `x"}`, "", "client_id"},
		{"not a string", `{"type":"inject","text":"","wake":false,"client_id":5}`, "", "client_id"},
		{"with a bad frame", `{"type":"inject","wake":false,"client_id":"k"}`, "", "text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, meta, err := protocol.ParseMeta([]byte(tt.frame))
			if tt.field != "" {
				var bf *protocol.BadFrameError
				if !errors.As(err, &bf) || bf.Field != tt.field || f != nil {
					t.Fatalf("ParseMeta = %v, %v; want a bad_frame naming field %q", f, err, tt.field)
				}
				if !strings.Contains(bf.Message, tt.field) {
					t.Fatalf("message %q does not name %q", bf.Message, tt.field)
				}
				return
			}
			if err != nil || meta.ClientID != tt.want {
				t.Fatalf("ParseMeta = client_id %q, %v; want %q", meta.ClientID, err, tt.want)
			}
		})
	}
}
