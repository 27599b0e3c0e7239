package outbox

import "time"

// DefaultAppCode is the tenant of an Event whose AppCode is empty.
const DefaultAppCode = "default"

// Event is one domain event of a room, the input of Producer.Enqueue and Producer.EnqueueBatch.
//
// Only EventType and RoomID are required; the zero values of the other fields get defaults when
// the event is written (AppCode "default", a new EventID, OccurredAt now, the trace context of
// Producer.TraceContext).
type Event struct {
	// AppCode is the tenant; empty means DefaultAppCode. At most 64 characters.
	AppCode string
	// EventID is the idempotency key, unique per AppCode: writing an id twice keeps the first
	// row. Empty means a new id from NewEventID (of OccurredAt's millisecond). Give an id derived
	// from the command (e.g. "gift-" + orderID) to make retrying the command safe. At most 128
	// characters.
	EventID string
	// EventType is the routing key, e.g. RoomGiftSent. Required, at most 128 characters.
	EventType string
	// RoomID is the room the event belongs to; per-room ordering is keyed on (AppCode, RoomID).
	// Required, at most 128 characters.
	RoomID string
	// RoomVersion is the version of the room state after this event.
	RoomVersion int64
	// OccurredAt is when the event happened, stored as UTC milliseconds since the Unix epoch
	// (the envelope's occurred_at_ms and the row's created_at_ms, the claim order). The zero
	// time means now.
	OccurredAt time.Time
	// Body is the event message itself, opaque to outboxd (usually a serialized protobuf
	// message). Nil and empty are the same.
	Body []byte
	// TraceParent is the W3C Trace Context of the producer's span (the `traceparent` header
	// value, e.g. "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), carried in the
	// envelope for the sinks to join the trace. Empty means none given: the event then gets
	// the context of Producer.TraceContext, when set. Checked before writing (version 00 is
	// exactly 55 characters, a later version at most 256; see producers/SPEC.md, "Trace
	// context").
	TraceParent string
	// TraceState is the W3C `tracestate` header value that goes with TraceParent: at most 512
	// characters of printable ASCII, and only with a TraceParent. Empty means none.
	TraceState string
}

// Build wraps an event body into an Event of the default tenant with a new, time-ordered
// EventID (of occurredAt's millisecond), like the room-service's outbox.Build. The zero
// occurredAt means now. Set AppCode or EventID on the result to change them.
func Build(roomID, eventType string, roomVersion int64, occurredAt time.Time, body []byte) Event {
	if occurredAt.IsZero() {
		occurredAt = time.Now()
	}
	return Event{
		AppCode:     DefaultAppCode,
		EventID:     NewEventID(occurredAt.UnixMilli()),
		EventType:   eventType,
		RoomID:      roomID,
		RoomVersion: roomVersion,
		OccurredAt:  occurredAt,
		Body:        body,
	}
}
