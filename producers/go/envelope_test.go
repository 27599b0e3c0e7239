package outbox

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"
)

// goldenFile is the shared golden vectors file (producers/golden/envelopes.json).
const goldenFile = "../golden/envelopes.json"

// goldenEvent is one case's event in the golden file.
type goldenEvent struct {
	AppCode      string `json:"app_code"`
	EventID      string `json:"event_id"`
	RoomID       string `json:"room_id"`
	EventType    string `json:"event_type"`
	RoomVersion  string `json:"room_version"`
	OccurredAtMS string `json:"occurred_at_ms"`
	BodyHex      string `json:"body_hex"`
	Traceparent  string `json:"traceparent"`
	Tracestate   string `json:"tracestate"`
}

// untraced is e as the library's Event, without its trace context.
func (e goldenEvent) untraced(t *testing.T) Event {
	t.Helper()
	return Event{
		AppCode:     e.AppCode,
		EventID:     e.EventID,
		EventType:   e.EventType,
		RoomID:      e.RoomID,
		RoomVersion: mustInt64(t, e.RoomVersion),
		OccurredAt:  time.UnixMilli(mustInt64(t, e.OccurredAtMS)),
		Body:        mustHex(t, e.BodyHex),
	}
}

// golden is the part of the golden file the Go tests read.
type golden struct {
	Cases []struct {
		Name        string      `json:"name"`
		Event       goldenEvent `json:"event"`
		EnvelopeHex string      `json:"envelope_hex"`
	} `json:"cases"`
	EventIDPrefixes []struct {
		MS     string `json:"ms"`
		Prefix string `json:"prefix"`
	} `json:"event_id_prefixes"`
	TraceparentChecks []struct {
		Traceparent string `json:"traceparent"`
		Valid       bool   `json:"valid"`
	} `json:"traceparent_checks"`
}

// loadGolden reads and parses the golden file.
func loadGolden(t *testing.T) golden {
	t.Helper()
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("read golden vectors: %v", err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("parse %s: %v", goldenFile, err)
	}
	if len(g.Cases) < 5 || len(g.EventIDPrefixes) < 3 || len(g.TraceparentChecks) < 10 {
		t.Fatalf("%s holds %d cases, %d prefixes and %d traceparent checks: too few", goldenFile,
			len(g.Cases), len(g.EventIDPrefixes), len(g.TraceparentChecks))
	}
	return g
}

// mustInt64 parses a decimal int64 of the golden file.
func mustInt64(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("golden int64 %q: %v", s, err)
	}
	return n
}

// mustHex decodes hex of the golden file.
func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("golden hex %q: %v", s, err)
	}
	return b
}

func TestEnvelopeMatchesEveryGoldenCase(t *testing.T) {
	for _, c := range loadGolden(t).Cases {
		t.Run(c.Name, func(t *testing.T) {
			got := envelope{
				appCode:      c.Event.AppCode,
				eventID:      c.Event.EventID,
				roomID:       c.Event.RoomID,
				eventType:    c.Event.EventType,
				roomVersion:  mustInt64(t, c.Event.RoomVersion),
				occurredAtMS: mustInt64(t, c.Event.OccurredAtMS),
				body:         mustHex(t, c.Event.BodyHex),
				traceparent:  c.Event.Traceparent,
				tracestate:   c.Event.Tracestate,
			}.marshal()
			if hex.EncodeToString(got) != c.EnvelopeHex {
				t.Errorf("envelope\n got %x\nwant %s", got, c.EnvelopeHex)
			}
		})
	}
}

// Every golden case that is a writable event (non-empty tenant, type and room) comes out of the
// path Enqueue takes (defaults, checks, encoding) as the golden bytes, the traced ones too.
func TestPreparedRowCarriesTheGoldenEnvelope(t *testing.T) {
	checked, traced := 0, 0
	for _, c := range loadGolden(t).Cases {
		e := c.Event
		if e.AppCode == "" || e.EventType == "" || e.RoomID == "" || e.EventID == "" {
			continue
		}
		ms := mustInt64(t, e.OccurredAtMS)
		event := e.untraced(t)
		event.TraceParent, event.TraceState = e.Traceparent, e.Tracestate
		r, err := prepare(context.Background(), 0, event, 12345, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if hex.EncodeToString(r.envelope) != c.EnvelopeHex {
			t.Errorf("%s: envelope\n got %x\nwant %s", c.Name, r.envelope, c.EnvelopeHex)
		}
		if r.createdAtMS != ms || r.appCode != e.AppCode || r.eventID != e.EventID ||
			r.eventType != e.EventType || r.roomID != e.RoomID {
			t.Errorf("%s: row columns %+v", c.Name, r)
		}
		checked++
		if e.Traceparent != "" {
			traced++
		}
	}
	if checked < 5 || traced < 2 {
		t.Fatalf("only %d golden cases are writable events, %d of them traced", checked, traced)
	}
}

// The same golden events written without a trace context of their own, by a producer whose
// TraceContext hook returns the golden one, come out as the golden bytes too.
func TestHookMadeTraceContextMatchesTheGoldenEnvelope(t *testing.T) {
	checked := 0
	for _, c := range loadGolden(t).Cases {
		e := c.Event
		if e.Traceparent == "" || e.AppCode == "" || e.EventType == "" || e.RoomID == "" || e.EventID == "" {
			continue
		}
		hook := func(context.Context) (string, string) { return e.Traceparent, e.Tracestate }
		r, err := prepare(context.Background(), 0, e.untraced(t), 0, hook)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if hex.EncodeToString(r.envelope) != c.EnvelopeHex {
			t.Errorf("%s: envelope\n got %x\nwant %s", c.Name, r.envelope, c.EnvelopeHex)
		}
		checked++
	}
	if checked < 2 {
		t.Fatalf("only %d golden cases are traced writable events", checked)
	}
}

// Every library accepts exactly the valid traceparent_checks: given on the event, or returned by
// Producer.TraceContext.
func TestTraceparentChecksOfTheGoldenFile(t *testing.T) {
	longestValid := 0
	for _, c := range loadGolden(t).TraceparentChecks {
		if n := utf8.RuneCountInString(c.Traceparent); c.Valid && n > longestValid {
			longestValid = n
		}
		field, reason := checkTraceContext(c.Traceparent, "", "")
		if accepted := field == ""; accepted != c.Valid {
			t.Errorf("%q: accepted %v (%s %s), want %v", c.Traceparent, accepted, field, reason, c.Valid)
			continue
		}
		given := validEvent()
		given.TraceParent = c.Traceparent
		runs := []struct {
			name  string
			event Event
			hook  func(context.Context) (string, string)
		}{
			{"given", given, nil},
			{"from the hook", validEvent(), func(context.Context) (string, string) { return c.Traceparent, "" }},
		}
		for _, run := range runs {
			got, err := prepare(context.Background(), 2, run.event, 0, run.hook)
			if !c.Valid {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != "traceparent" || fe.Index != 2 || fe.EventID != "e-1" {
					t.Errorf("%s %q: want a traceparent *FieldError of event #2, got %v", run.name, c.Traceparent, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s %q: %v", run.name, c.Traceparent, err)
				continue
			}
			want := envelope{appCode: "live", eventID: "e-1", roomID: "room-1", eventType: "RoomGiftSent",
				roomVersion: 3, occurredAtMS: 1_700_000_000_000, body: []byte("x"), traceparent: c.Traceparent}.marshal()
			if string(got.envelope) != string(want) {
				t.Errorf("%s %q: envelope %x, want %x", run.name, c.Traceparent, got.envelope, want)
			}
		}
	}
	if longestValid != maxTraceparentChars {
		t.Errorf("the longest valid traceparent check is %d characters, want the cap's edge, %d",
			longestValid, maxTraceparentChars)
	}
}

func TestVarintBoundaries(t *testing.T) {
	cases := map[uint64]string{
		0: "00", 1: "01", 127: "7f", 128: "8001", 300: "ac02", 16383: "ff7f", 16384: "808001",
		1<<63 - 1: "ffffffffffffffff7f", 1 << 63: "80808080808080808001",
	}
	for value, want := range cases {
		if got := hex.EncodeToString(appendVarint(nil, value)); got != want {
			t.Errorf("varint %d = %s, want %s", value, got, want)
		}
	}
}
