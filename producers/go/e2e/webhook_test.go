package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// delivery is one JSON event the webhook plugin posted (the plugin SDK's event_json form).
type delivery struct {
	AppCode      string `json:"app_code"`
	EventID      string `json:"event_id"`
	EventType    string `json:"event_type"`
	RoomID       string `json:"room_id"`
	RoomVersion  int64  `json:"room_version"`
	OccurredAtMS int64  `json:"occurred_at_ms"`
	Attempt      int64  `json:"attempt"`
	Body         []byte `json:"body"` // base64 in the JSON
}

// traceHeaders are the trace context headers of one delivery request: every value of each
// (nil: the header was absent).
type traceHeaders struct {
	traceparent, tracestate []string
}

// receiver is the test's webhook endpoint on 127.0.0.1.
type receiver struct {
	URL string // http://127.0.0.1:<port>/hook

	mu       sync.Mutex
	received []delivery
	// traces: the trace context headers of each delivery, by app_code/webhook-id (the webhook-id
	// is the event id: serve checks it).
	traces   map[string]traceHeaders
	problems []string
	listener net.Listener
	server   *http.Server
}

// newReceiver starts a receiver; it stops when the test ends.
func newReceiver(t *testing.T) *receiver {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{URL: "http://" + listener.Addr().String() + "/hook", listener: listener, traces: map[string]traceHeaders{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", r.serve)
	r.server = &http.Server{Handler: mux}
	go func() { _ = r.server.Serve(listener) }()
	t.Cleanup(func() { _ = r.server.Close() })
	return r
}

// serve records one delivery; anything malformed is noted as a problem (and answered 400, so
// the host would retry rather than mark it delivered).
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	payload, err := io.ReadAll(req.Body)
	var d delivery
	problem := ""
	switch {
	case err != nil:
		problem = "reading the request: " + err.Error()
	case req.Method != http.MethodPost || req.Header.Get("content-type") != "application/json":
		problem = fmt.Sprintf("%s with content-type %q", req.Method, req.Header.Get("content-type"))
	default:
		problem = decodeStrict(payload, &d)
		if problem == "" && req.Header.Get("webhook-id") != d.EventID {
			problem = fmt.Sprintf("webhook-id %q != event_id %q", req.Header.Get("webhook-id"), d.EventID)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if problem != "" {
		r.problems = append(r.problems, problem+": "+string(payload))
		http.Error(w, problem, http.StatusBadRequest)
		return
	}
	key := d.AppCode + "/" + req.Header.Get("webhook-id")
	if _, again := r.traces[key]; again {
		r.problems = append(r.problems, "trace headers of "+key+" received twice")
	}
	r.traces[key] = traceHeaders{
		traceparent: req.Header.Values("traceparent"),
		tracestate:  req.Header.Values("tracestate"),
	}
	r.received = append(r.received, d)
	w.WriteHeader(http.StatusNoContent)
}

// decodeStrict decodes payload into d and tells what is wrong when it is not exactly the
// 8-field event JSON.
func decodeStrict(payload []byte, d *delivery) string {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(payload, &fields); err != nil {
		return "not a JSON object: " + err.Error()
	}
	if len(fields) != 8 {
		return fmt.Sprintf("%d fields, want 8", len(fields))
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(d); err != nil {
		return "decode: " + err.Error()
	}
	return ""
}

// snapshot returns what was received so far and the problems seen.
func (r *receiver) snapshot() ([]delivery, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.received...), append([]string(nil), r.problems...)
}

// traceHeadersOf returns the trace context headers the delivery of event appCode/eventID came
// with, and whether it was received.
func (r *receiver) traceHeadersOf(appCode, eventID string) (traceHeaders, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.traces[appCode+"/"+eventID]
	return h, ok
}
