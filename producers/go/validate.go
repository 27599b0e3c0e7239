package outbox

import (
	"context"
	"fmt"
	"strings"
	"unicode"
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

// The W3C Trace Context an event may carry (producers/SPEC.md, "Trace context"): a version 00
// traceparent is version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits joined by '-'
// (55 characters), a later version may go on after a further '-', to at most 256 characters
// (Unicode scalar values) in all; a tracestate is at most 512 characters (what W3C Trace Context
// asks every vendor to pass on) of printable ASCII.
const (
	traceparentChars    = 55
	maxTraceparentChars = 256
	maxTracestateChars  = 512
)

// A tracestate list member longer than this is the first to go when a captured tracestate is cut
// to maxTracestateChars (W3C Trace Context, "tracestate Limits").
const longTracestateMemberChars = 128

// row is one event ready to be written: defaults applied, envelope encoded.
type row struct {
	appCode     string
	eventID     string
	eventType   string
	roomID      string
	envelope    []byte
	createdAtMS int64
}

// prepare applies the defaults to event number index (AppCode, OccurredAt = nowMS, EventID, and
// when the event has no TraceParent, the trace context traceContext returns for ctx, if
// traceContext is not nil, its tracestate fitted by fitTracestate), checks it against the
// table's columns and the W3C Trace Context format and encodes its envelope.
func prepare(ctx context.Context, index int, event Event, nowMS int64,
	traceContext func(context.Context) (traceparent, tracestate string)) (row, error) {
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
	fail := func(field, reason string) (row, error) {
		return row{}, &FieldError{Index: index, EventID: eventID, Field: field, Reason: reason}
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
			return fail(f.name, reason)
		}
	}
	traceparent, tracestate := event.TraceParent, event.TraceState
	if field, reason := checkTraceContext(traceparent, tracestate, ""); field != "" {
		return fail(field, reason)
	}
	if traceparent == "" && traceContext != nil {
		traceparent, tracestate = traceContext(ctx)
		if traceparent != "" {
			// Captured from the current span, like the Python and TypeScript libraries' own: a
			// tracestate too long is cut to fit, one that cannot be a tracestate is dropped, so
			// the event is never refused for it. A tracestate without a traceparent still is.
			tracestate = fitTracestate(tracestate)
		}
		if field, reason := checkTraceContext(traceparent, tracestate, "from Producer.TraceContext "); field != "" {
			return fail(field, reason)
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
			traceparent:  traceparent,
			tracestate:   tracestate,
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

// checkTraceContext tells which of traceparent and tracestate is wrong and why, or returns two
// empty strings when both can be written (both empty: no trace context). from, "" or e.g.
// "from Producer.TraceContext ", says in the reason where the values came from.
func checkTraceContext(traceparent, tracestate, from string) (field, reason string) {
	if traceparent != "" {
		if problem := traceparentProblem(traceparent); problem != "" {
			return "traceparent", fmt.Sprintf("%s %sis not a W3C traceparent: %s", shown(traceparent), from, problem)
		}
		if !utf8.ValidString(traceparent) { // only possible after the flags, in a later version
			return "traceparent", from + "is not valid UTF-8"
		}
	}
	if tracestate != "" {
		if traceparent == "" {
			return "tracestate", from + "is given without a traceparent"
		}
		if problem := tracestateProblem(tracestate); problem != "" {
			return "tracestate", from + problem
		}
	}
	return "", ""
}

// traceparentProblem tells why value is not a W3C traceparent, or returns "" when it is one:
// version (2 lowercase hex digits, not ff), trace id (32, not all zeros), parent id (16, not all
// zeros) and flags (2), joined by '-'; version 00 is exactly 55 characters, a later version may
// go on after a further '-' (a newer format, passed on unread), to at most maxTraceparentChars
// characters in all.
func traceparentProblem(value string) string {
	if len(value) < traceparentChars ||
		!lowerHex(value[0:2]) || value[2] != '-' ||
		!lowerHex(value[3:35]) || value[35] != '-' ||
		!lowerHex(value[36:52]) || value[52] != '-' ||
		!lowerHex(value[53:55]) {
		return "expected version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits joined by '-'"
	}
	version, traceID, parentID := value[0:2], value[3:35], value[36:52]
	switch {
	case version == "ff":
		return "version ff is invalid"
	case strings.Trim(traceID, "0") == "":
		return "the trace id is all zeros"
	case strings.Trim(parentID, "0") == "":
		return "the parent id is all zeros"
	case len(value) > traceparentChars && version == "00":
		return fmt.Sprintf("version 00 is exactly %d characters, this is %d",
			traceparentChars, utf8.RuneCountInString(value))
	case len(value) > traceparentChars && value[traceparentChars] != '-':
		return "a later version goes on after the flags only behind a '-'"
	case len(value) > maxTraceparentChars && utf8.RuneCountInString(value) > maxTraceparentChars:
		return fmt.Sprintf("a later version is at most %d characters, this is %d",
			maxTraceparentChars, utf8.RuneCountInString(value))
	}
	return ""
}

// tracestateProblem tells why value cannot be a W3C tracestate (at most 512 characters of
// printable ASCII, 0x20-0x7e), or returns "" when it can.
func tracestateProblem(value string) string {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 || c > 0x7e {
			// Everything before i is ASCII: i counts characters too.
			_, size := utf8.DecodeRuneInString(value[i:])
			return fmt.Sprintf("has %q at %d, only printable ASCII (0x20-0x7e) is allowed", value[i:i+size], i)
		}
	}
	if len(value) > maxTracestateChars {
		return fmt.Sprintf("is %d characters, at most %d fit", len(value), maxTracestateChars)
	}
	return ""
}

// fitTracestate returns header, a serialized tracestate captured from a span (what
// Producer.TraceContext returns), cut to at most 512 characters by dropping whole list members
// as W3C Trace Context recommends: those over 128 characters first, the last first, then
// members from the end, until what is left fits. A header that is cut is rebuilt from its
// members, without the empty ones and without the whitespace around them; one that already fits
// is left as it is. It returns "" when what is left is not printable ASCII (the event must not
// fail for its span's trace state). The Python library's fit_tracestate and the TypeScript
// library's fitTracestate do the same; characters are counted as Unicode code points and
// whitespace is what Python's str.strip drops (the same for the ASCII that a tracestate is).
func fitTracestate(header string) string {
	if utf8.RuneCountInString(header) > maxTracestateChars {
		var members []string
		for _, member := range strings.Split(header, ",") {
			if member = strings.TrimFunc(member, isStripped); member != "" {
				members = append(members, member)
			}
		}
		chars := make([]int, len(members))
		dropped := make([]bool, len(members))
		kept, keptChars := len(members), 0
		for i, member := range members {
			chars[i] = utf8.RuneCountInString(member)
			keptChars += chars[i]
		}
		fits := func() bool { return kept == 0 || keptChars+kept-1 <= maxTracestateChars }
		drop := func(i int) { dropped[i], kept, keptChars = true, kept-1, keptChars-chars[i] }
		// The long members go first, the last first...
		for i := len(members) - 1; i >= 0 && !fits(); i-- {
			if chars[i] > longTracestateMemberChars {
				drop(i)
			}
		}
		// ...then, if that is not enough, the members from the end.
		for i := len(members) - 1; i >= 0 && !fits(); i-- {
			if !dropped[i] {
				drop(i)
			}
		}
		var fitted strings.Builder
		for i, member := range members {
			if !dropped[i] {
				if fitted.Len() > 0 {
					fitted.WriteByte(',')
				}
				fitted.WriteString(member)
			}
		}
		header = fitted.String()
	}
	if tracestateProblem(header) != "" {
		return ""
	}
	return header
}

// isStripped reports whether r is whitespace to Python's str.strip: Unicode's (unicode.IsSpace)
// and the ASCII separators 0x1c-0x1f.
func isStripped(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// lowerHex reports whether s is made of lowercase hex digits only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// shown quotes value for an error message, cut to its first 80 characters.
func shown(value string) string {
	if runes := []rune(value); len(runes) > 80 {
		value = string(runes[:80]) + "…"
	}
	return fmt.Sprintf("%q", value)
}
