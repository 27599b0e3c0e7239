package outbox

import (
	"fmt"
	"unicode/utf8"
)

// Column sizes of the outbox table (migration 0001), in characters (Unicode scalar values, as
// the host counts them). Checked before writing so an event is refused alike on every database:
// SQLite does not enforce VARCHAR sizes, MySQL and PostgreSQL reject the whole statement.
const (
	maxAppCodeChars   = 64
	maxEventIDChars   = 128
	maxEventTypeChars = 128
	maxRoomIDChars    = 128
)

// row is one event ready to be written: defaults applied, envelope encoded.
type row struct {
	appCode     string
	eventID     string
	eventType   string
	roomID      string
	envelope    []byte
	createdAtMS int64
}

// prepare applies the defaults to event number index (AppCode, OccurredAt = nowMS, EventID),
// checks it against the table's columns and encodes its envelope.
func prepare(index int, event Event, nowMS int64) (row, error) {
	appCode := event.AppCode
	if appCode == "" {
		appCode = DefaultAppCode
	}
	occurredAtMS := nowMS
	if !event.OccurredAt.IsZero() {
		occurredAtMS = event.OccurredAt.UnixMilli()
	}
	eventID := event.EventID
	if eventID == "" {
		eventID = NewEventID(occurredAtMS)
	}
	fields := []struct {
		name     string
		value    string
		maxChars int
	}{
		{"app_code", appCode, maxAppCodeChars},
		{"event_id", eventID, maxEventIDChars},
		{"event_type", event.EventType, maxEventTypeChars},
		{"room_id", event.RoomID, maxRoomIDChars},
	}
	for _, f := range fields {
		if reason := checkText(f.value, f.maxChars); reason != "" {
			return row{}, &FieldError{Index: index, EventID: eventID, Field: f.name, Reason: reason}
		}
	}
	return row{
		appCode:   appCode,
		eventID:   eventID,
		eventType: event.EventType,
		roomID:    event.RoomID,
		envelope: envelope{
			appCode:      appCode,
			eventID:      eventID,
			roomID:       event.RoomID,
			eventType:    event.EventType,
			roomVersion:  event.RoomVersion,
			occurredAtMS: occurredAtMS,
			body:         event.Body,
		}.marshal(),
		createdAtMS: occurredAtMS,
	}, nil
}

// checkText tells what is wrong with a required text field of at most maxChars characters, or
// returns "" when nothing is. Protobuf strings must be UTF-8: the host could not decode an
// envelope holding anything else.
func checkText(value string, maxChars int) string {
	switch chars := utf8.RuneCountInString(value); {
	case chars == 0:
		return "is empty"
	case !utf8.ValidString(value):
		return "is not valid UTF-8"
	case chars > maxChars:
		return fmt.Sprintf("is %d characters, at most %d fit", chars, maxChars)
	}
	return ""
}
