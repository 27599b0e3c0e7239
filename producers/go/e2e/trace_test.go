package e2e

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// The span the test's batch is written in (W3C Trace Context's example).
const (
	spanTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	spanTracestate  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
)

// spanKey is the context key of the test's stand-in for a tracing library's current span.
type spanKey struct{}

// withSpan returns ctx in the span of the given trace context.
func withSpan(ctx context.Context, traceparent, tracestate string) context.Context {
	return context.WithValue(ctx, spanKey{}, [2]string{traceparent, tracestate})
}

// currentSpan is the producer's TraceContext hook: the span withSpan put into ctx, if any (what
// an application's hook reads from its tracing library).
func currentSpan(ctx context.Context) (traceparent, tracestate string) {
	span, _ := ctx.Value(spanKey{}).([2]string)
	return span[0], span[1]
}

// traceOf returns the traceparent and tracestate (fields 8 and 9) of an outbox.v1.EventEnvelope,
// read from the protobuf wire format.
func traceOf(envelope []byte) (traceparent, tracestate string, err error) {
	for len(envelope) > 0 {
		key, n := binary.Uvarint(envelope)
		if n <= 0 {
			return "", "", errors.New("truncated field key")
		}
		envelope = envelope[n:]
		switch key & 7 {
		case 0: // varint
			if _, n = binary.Uvarint(envelope); n <= 0 {
				return "", "", fmt.Errorf("field %d: truncated varint", key>>3)
			}
			envelope = envelope[n:]
		case 2: // length-delimited
			size, n := binary.Uvarint(envelope)
			if n <= 0 || size > uint64(len(envelope)-n) {
				return "", "", fmt.Errorf("field %d: truncated", key>>3)
			}
			value := string(envelope[n : n+int(size)])
			envelope = envelope[n+int(size):]
			switch key >> 3 {
			case 8:
				traceparent = value
			case 9:
				tracestate = value
			}
		default:
			return "", "", fmt.Errorf("field %d: unexpected wire type %d", key>>3, key&7)
		}
	}
	return traceparent, tracestate, nil
}

// checkTraceContexts checks that the envelope of every event's row carries the trace context the
// event was written with (its own, the hook's, or none).
func checkTraceContexts(t *testing.T, db *sql.DB, want []expected, received []delivery) {
	t.Helper()
	rows, err := db.Query("SELECT app_code, event_id, envelope FROM room_outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	envelopes := map[string][]byte{}
	for rows.Next() {
		var appCode, eventID string
		var envelope []byte
		if err := rows.Scan(&appCode, &eventID, &envelope); err != nil {
			t.Fatal(err)
		}
		envelopes[appCode+"/"+eventID] = envelope
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	byKey := map[string]delivery{}
	for _, d := range received {
		byKey[fmt.Sprintf("%s/%s/%d", d.AppCode, d.RoomID, d.RoomVersion)] = d
	}
	traced, fromHook := 0, 0
	for _, w := range want {
		d, ok := byKey[w.key()]
		if !ok {
			continue // checkDeliveries reported it
		}
		envelope, ok := envelopes[d.AppCode+"/"+d.EventID]
		if !ok {
			t.Errorf("%s: no row %s/%s", w.key(), d.AppCode, d.EventID)
			continue
		}
		traceparent, tracestate, err := traceOf(envelope)
		switch {
		case err != nil:
			t.Errorf("%s: envelope %x: %v", w.key(), envelope, err)
		case traceparent != w.traceparent || tracestate != w.tracestate:
			t.Errorf("%s: trace context (%q, %q), want (%q, %q)", w.key(), traceparent, tracestate, w.traceparent, w.tracestate)
		case traceparent != "":
			traced++
			if w.event.TraceParent == "" {
				fromHook++
			}
		}
	}
	if traced == 0 || fromHook == 0 || traced == fromHook {
		t.Errorf("%d rows carry a trace context, %d of them the hook's: the test traced too little", traced, fromHook)
	}
	t.Logf("%d rows carry a trace context, %d of them from Producer.TraceContext", traced, fromHook)
}

// checkTraceHeaders checks that the webhook request of every delivered event carried the trace
// context the event was written with (its own, or the hook's) as the headers traceparent and
// tracestate (tracestate only when not empty), and neither header for an event written without
// one: the producer's trace context reaches the receiver through the host and the plugin.
func checkTraceHeaders(t *testing.T, hook *receiver, want []expected, received []delivery) {
	t.Helper()
	byKey := map[string]delivery{}
	for _, d := range received {
		byKey[fmt.Sprintf("%s/%s/%d", d.AppCode, d.RoomID, d.RoomVersion)] = d
	}
	header := func(value string) []string {
		if value == "" {
			return nil // absent
		}
		return []string{value}
	}
	withState, withoutState, fromHook, none := 0, 0, 0, 0
	for _, w := range want {
		d, ok := byKey[w.key()]
		if !ok {
			continue // checkDeliveries reported it
		}
		got, ok := hook.traceHeadersOf(d.AppCode, d.EventID)
		if !ok {
			t.Errorf("%s: no trace headers recorded for webhook-id %q", w.key(), d.EventID)
			continue
		}
		wantParent, wantState := header(w.traceparent), header(w.tracestate)
		if fmt.Sprintf("%q", got.traceparent) != fmt.Sprintf("%q", wantParent) ||
			fmt.Sprintf("%q", got.tracestate) != fmt.Sprintf("%q", wantState) {
			t.Errorf("%s (webhook-id %q): headers traceparent %q, tracestate %q; want traceparent %q, tracestate %q",
				w.key(), d.EventID, got.traceparent, got.tracestate, wantParent, wantState)
			continue
		}
		switch {
		case w.traceparent == "":
			none++
		case w.tracestate == "":
			withoutState++
		default:
			withState++
		}
		if w.traceparent != "" && w.event.TraceParent == "" {
			fromHook++
		}
	}
	if withState == 0 || withoutState == 0 || fromHook == 0 || none == 0 {
		t.Errorf("trace headers: %d with a tracestate, %d without, %d from the hook, %d events without a context: the test traced too little or too much",
			withState, withoutState, fromHook, none)
	}
	t.Logf("trace headers as written: %d with a tracestate, %d without, %d of them the hook's; none on %d events",
		withState, withoutState, fromHook, none)
}
