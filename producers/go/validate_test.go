package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// validEvent is an event every check accepts.
func validEvent() Event {
	return Event{AppCode: "live", EventID: "e-1", EventType: "RoomGiftSent", RoomID: "room-1", RoomVersion: 3,
		OccurredAt: time.UnixMilli(1_700_000_000_000), Body: []byte("x")}
}

func TestPrepareRefusesEventsThatDoNotFit(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Event)
		field  string
		reason string
	}{
		{"empty type", func(e *Event) { e.EventType = "" }, "event_type", "is empty"},
		{"empty room", func(e *Event) { e.RoomID = "" }, "room_id", "is empty"},
		{"long app code", func(e *Event) { e.AppCode = strings.Repeat("a", 65) }, "app_code", "is 65 characters, at most 64 fit"},
		{"long id", func(e *Event) { e.EventID = strings.Repeat("é", 129) }, "event_id", "is 129 characters, at most 128 fit"},
		{"long type", func(e *Event) { e.EventType = strings.Repeat("t", 129) }, "event_type", "is 129 characters, at most 128 fit"},
		{"long room", func(e *Event) { e.RoomID = strings.Repeat("🎁", 129) }, "room_id", "is 129 characters, at most 128 fit"},
		{"bad utf-8", func(e *Event) { e.RoomID = "room-\xff" }, "room_id", "is not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := validEvent()
			c.change(&e)
			_, err := prepare(context.Background(), 4, e, 0, nil)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want *FieldError, got %v", err)
			}
			if fe.Field != c.field || fe.Reason != c.reason || fe.Index != 4 || fe.EventID != e.EventID {
				t.Fatalf("got %+v", fe)
			}
			if !strings.Contains(err.Error(), "event #4") || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("message %q names neither the event nor the field", err)
			}
		})
	}
}

func TestPrepareAcceptsLimitsCountedInCharacters(t *testing.T) {
	e := validEvent()
	e.AppCode = strings.Repeat("直", 64) // 192 bytes, 64 characters
	e.EventID = strings.Repeat("é", 128)
	e.EventType = strings.Repeat("t", 128)
	e.RoomID = strings.Repeat("🎁", 128)
	if _, err := prepare(context.Background(), 0, e, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func TestPrepareAppliesDefaults(t *testing.T) {
	r, err := prepare(context.Background(), 0, Event{EventType: "RoomMicChanged", RoomID: "r"}, 1_733_011_200_123, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.appCode != DefaultAppCode || r.createdAtMS != 1_733_011_200_123 {
		t.Fatalf("defaults not applied: %+v", r)
	}
	if !eventIDPattern.MatchString(r.eventID) || r.eventID[:17] != "evt_001937f84587b" {
		t.Fatalf("generated id %q is not of the event's millisecond", r.eventID)
	}
	want := envelope{appCode: "default", eventID: r.eventID, roomID: "r", eventType: "RoomMicChanged",
		occurredAtMS: 1_733_011_200_123}.marshal()
	if string(r.envelope) != string(want) {
		t.Fatalf("envelope %x, want %x", r.envelope, want)
	}
}

func TestBuildIsLikeTheSeedsOutboxBuild(t *testing.T) {
	at := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)
	e := Build("room-42", "RoomGiftSent", 7, at, []byte("rose"))
	if e.AppCode != "default" || e.RoomID != "room-42" || e.EventType != "RoomGiftSent" ||
		e.RoomVersion != 7 || !e.OccurredAt.Equal(at) || string(e.Body) != "rose" {
		t.Fatalf("Build = %+v", e)
	}
	if e.EventID[:17] != "evt_0018bcfe56800" || !eventIDPattern.MatchString(e.EventID) {
		t.Fatalf("Build's id %q is not of occurredAt's millisecond", e.EventID)
	}
	before := time.Now()
	if now := Build("r", "t", 0, time.Time{}, nil); now.OccurredAt.Before(before) || now.OccurredAt.IsZero() {
		t.Fatalf("zero occurredAt did not become now: %v", now.OccurredAt)
	}
}

func TestFieldErrorShortensLongIDs(t *testing.T) {
	err := (&FieldError{Index: 1, EventID: strings.Repeat("é", 200), Field: "room_id", Reason: "is empty"}).Error()
	if strings.Count(err, "é") != 40 || !strings.HasSuffix(err, "room_id is empty") {
		t.Fatalf("message %q", err)
	}
}
