package outbox

import "fmt"

// FieldError is returned when an event does not fit the outbox table: a required field is empty,
// a field is too long for its column or is not valid UTF-8, or its trace context (given or from
// Producer.TraceContext) is not W3C Trace Context. Nothing of the call was written.
type FieldError struct {
	// Index is the event's position in the EnqueueBatch slice (0 for Enqueue).
	Index int
	// EventID is the event's id (generated or given), to find the event in logs.
	EventID string
	// Field is the column/envelope field at fault: app_code, event_id, event_type, room_id,
	// traceparent or tracestate.
	Field string
	// Reason tells what is wrong, e.g. "is 130 characters, at most 128 fit".
	Reason string
}

// Error reads e.g. `outbox: event #3 (id "evt_…"): room_id is 130 characters, at most 128 fit`.
func (e *FieldError) Error() string {
	id := e.EventID
	if len([]rune(id)) > 40 {
		id = string([]rune(id)[:40]) + "…"
	}
	return fmt.Sprintf("outbox: event #%d (id %q): %s %s", e.Index, id, e.Field, e.Reason)
}
