package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Trace contexts of the W3C Trace Context examples.
const (
	spanA  = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	stateA = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	spanB  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	stateB = "congo=ucfJifl5GOE,rojo=00f067aa0ba902b7"
)

// spanKey is the context key of the test's stand-in for a tracing library's current span.
type spanKey struct{}

// spanHook is a Producer.TraceContext reading the test's span from ctx, counting its calls.
func spanHook(calls *int) func(context.Context) (string, string) {
	return func(ctx context.Context) (string, string) {
		*calls++
		span, _ := ctx.Value(spanKey{}).([2]string)
		return span[0], span[1]
	}
}

// tracedEnvelope is the envelope of events("live", "t", n)[i] with the given trace context.
func tracedEnvelope(i int, traceparent, tracestate string) []byte {
	e := events("live", "t", i+1)[i]
	return envelope{appCode: e.AppCode, eventID: e.EventID, roomID: e.RoomID, eventType: e.EventType,
		roomVersion: e.RoomVersion, occurredAtMS: e.OccurredAt.UnixMilli(), body: e.Body,
		traceparent: traceparent, tracestate: tracestate}.marshal()
}

// wantFieldError checks that err is the *FieldError of event index (id eventID) for field, with
// a reason containing reason, and that nothing was written.
func wantFieldError(t *testing.T, f *fakeDB, err error, index int, eventID, field, reason string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want *FieldError, got %v", err)
	}
	if fe.Index != index || fe.EventID != eventID || fe.Field != field || !strings.Contains(fe.Reason, reason) {
		t.Fatalf("got %+v, want event #%d %q, %s %q…", fe, index, eventID, field, reason)
	}
	if !strings.Contains(err.Error(), eventID) || !strings.Contains(err.Error(), field+" ") {
		t.Fatalf("message %q names neither the event nor the field", err)
	}
	if f != nil && len(f.statements) != 0 {
		t.Fatalf("statements ran: %v", f.statements)
	}
}

func TestHookFillsEventsWithoutTraceParent(t *testing.T) {
	f := &fakeDB{}
	tx := begin(t, f)
	p, _ := New(Postgres, "")
	calls := 0
	p.TraceContext = spanHook(&calls)
	batch := events("live", "t", 4)
	batch[1].TraceParent = spanB // its own, with no tracestate
	batch[2].TraceParent, batch[2].TraceState = spanB, stateB
	ctx := context.WithValue(context.Background(), spanKey{}, [2]string{spanA, stateA})
	if n, err := p.EnqueueBatch(ctx, tx, batch); n != 4 || err != nil {
		t.Fatalf("%d, %v", n, err)
	}
	if calls != 2 {
		t.Fatalf("TraceContext called %d times, want 2 (once per event without a TraceParent)", calls)
	}
	want := [][]byte{
		tracedEnvelope(0, spanA, stateA), // the hook's
		tracedEnvelope(1, spanB, ""),     // its own: the hook's tracestate does not join it
		tracedEnvelope(2, spanB, stateB), // its own
		tracedEnvelope(3, spanA, stateA), // the hook's
	}
	for i, w := range want {
		if got := f.keys[[2]string{"live", batch[i].EventID}]; string(got) != string(w) {
			t.Errorf("event %d: envelope %x, want %x", i, got, w)
		}
	}
	if batch[0].TraceParent != "" || batch[0].TraceState != "" {
		t.Fatalf("the caller's event was changed: %+v", batch[0])
	}

	// No current span: the hook returns nothing, and the envelope is as without a hook.
	if ok, err := p.Enqueue(context.Background(), tx, events("live", "u", 1)[0]); !ok || err != nil {
		t.Fatalf("%v, %v", ok, err)
	}
	want0, _ := prepare(context.Background(), 0, events("live", "u", 1)[0], 0, nil)
	if got := f.keys[[2]string{"live", "u-0"}]; string(got) != string(want0.envelope) {
		t.Fatalf("envelope %x, want %x", got, want0.envelope)
	}
}

func TestExplicitTraceParentWinsOverHook(t *testing.T) {
	f := &fakeDB{}
	tx := begin(t, f)
	p, _ := New(SQLite, "")
	calls := 0
	p.TraceContext = spanHook(&calls)
	e := events("live", "t", 1)[0]
	e.TraceParent, e.TraceState = spanB, stateB
	ctx := context.WithValue(context.Background(), spanKey{}, [2]string{spanA, stateA})
	if ok, err := p.Enqueue(ctx, tx, e); !ok || err != nil {
		t.Fatalf("%v, %v", ok, err)
	}
	if calls != 0 {
		t.Fatalf("TraceContext called %d times for an event with its own TraceParent", calls)
	}
	if got, want := f.keys[[2]string{"live", "t-0"}], tracedEnvelope(0, spanB, stateB); string(got) != string(want) {
		t.Fatalf("envelope %x, want %x", got, want)
	}
}

func TestTracestateWithoutTraceparentIsRefused(t *testing.T) {
	for _, withHook := range []bool{false, true} {
		f := &fakeDB{}
		tx := begin(t, f)
		p, _ := New(MySQL, "")
		calls := 0
		if withHook { // the hook does not make the event's lone tracestate right
			p.TraceContext = spanHook(&calls)
		}
		batch := events("live", "t", 3)
		batch[1].TraceState = stateA
		ctx := context.WithValue(context.Background(), spanKey{}, [2]string{spanA, ""})
		n, err := p.EnqueueBatch(ctx, tx, batch)
		if n != 0 {
			t.Fatalf("hook %v: %d inserted", withHook, n)
		}
		wantFieldError(t, f, err, 1, "t-1", "tracestate", "is given without a traceparent")
		if err.Error() != `outbox: event #1 (id "t-1"): tracestate is given without a traceparent` {
			t.Fatalf("message %q", err)
		}
	}
}

func TestTracestateIsAtMost512PrintableCharacters(t *testing.T) {
	cases := []struct {
		name, tracestate, reason string
	}{
		{"513 characters", "k=" + strings.Repeat("v", 511), "is 513 characters, at most 512 fit"},
		{"600 characters", strings.Repeat("a=b,", 150), "is 600 characters, at most 512 fit"},
		{"a newline", "rojo=1\ncongo=2", `has "\n" at 6, only printable ASCII (0x20-0x7e) is allowed`},
		{"a tab", "\trojo=1", `has "\t" at 0, only printable ASCII (0x20-0x7e) is allowed`},
		{"DEL", "rojo=\x7f", `has "\x7f" at 5`},
		{"not ASCII", "rojo=é", `has "é" at 5`},
		{"not UTF-8", "rojo=\xff", `has "\xff" at 5`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := validEvent()
			e.TraceParent, e.TraceState = spanA, c.tracestate
			_, err := prepare(context.Background(), 0, e, 0, nil)
			wantFieldError(t, nil, err, 0, "e-1", "tracestate", c.reason)
		})
	}
	e := validEvent()
	e.TraceParent, e.TraceState = spanA, " k="+strings.Repeat("~", 509) // 512, both printable edges
	if _, err := prepare(context.Background(), 0, e, 0, nil); err != nil {
		t.Fatalf("512 printable characters refused: %v", err)
	}
}

func TestTraceparentErrorsNameTheValueAndTheProblem(t *testing.T) {
	cases := []struct {
		traceparent, message string
	}{
		{"ff" + spanA[2:], `traceparent "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" is not a W3C traceparent: version ff is invalid`},
		{"00-" + strings.Repeat("0", 32) + spanA[35:], "the trace id is all zeros"},
		{spanA[:36] + strings.Repeat("0", 16) + spanA[52:], "the parent id is all zeros"},
		{spanA + "-more", "version 00 is exactly 55 characters, this is 60"},
		{"01" + spanA[2:] + "x", "a later version goes on after the flags only behind a '-'"},
		{"01" + spanA[2:] + "-" + strings.Repeat("x", 201), "a later version is at most 256 characters, this is 257"},
		{"01" + spanA[2:] + "-" + strings.Repeat("é", 201), "a later version is at most 256 characters, this is 257"},
		{"01" + spanA[2:] + "-\xff", "traceparent is not valid UTF-8"},
		{strings.ToUpper(spanA), "expected version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits joined by '-'"},
		{strings.Repeat("z", 100), `"` + strings.Repeat("z", 80) + `…" is not a W3C traceparent`},
	}
	for _, c := range cases {
		e := validEvent()
		e.TraceParent = c.traceparent
		_, err := prepare(context.Background(), 3, e, 0, nil)
		wantFieldError(t, nil, err, 3, "e-1", "traceparent", "")
		if !strings.Contains(err.Error(), c.message) {
			t.Errorf("%q: message %q does not say %q", c.traceparent, err, c.message)
		}
	}
	e := validEvent()
	e.TraceParent = "01" + spanA[2:] + "-what-comes-later, 🎁" // a later version: passed on unread
	if _, err := prepare(context.Background(), 0, e, 0, nil); err != nil {
		t.Fatal(err)
	}
	// Up to maxTraceparentChars characters, not bytes: 256 of them in 456 bytes.
	e.TraceParent = "01" + spanA[2:] + "-" + strings.Repeat("é", maxTraceparentChars-56)
	if _, err := prepare(context.Background(), 0, e, 0, nil); err != nil {
		t.Fatalf("%d characters refused: %v", maxTraceparentChars, err)
	}
}

func TestHookOutputIsChecked(t *testing.T) {
	cases := []struct {
		name                    string
		traceparent, tracestate string
		field, message          string
	}{
		{"garbage traceparent", "not-a-traceparent", stateA, "traceparent",
			`traceparent "not-a-traceparent" from Producer.TraceContext is not a W3C traceparent: expected`},
		{"uppercase traceparent", strings.ToUpper(spanA), "", "traceparent",
			`traceparent "` + strings.ToUpper(spanA) + `" from Producer.TraceContext is not a W3C traceparent`},
		{"garbage traceparent, long tracestate", "garbage", strings.Repeat("a=b,", 200), "traceparent",
			`traceparent "garbage" from Producer.TraceContext is not a W3C traceparent`},
		{"tracestate alone", "", stateA, "tracestate", "tracestate from Producer.TraceContext is given without a traceparent"},
		{"long tracestate alone", "", strings.Repeat("a=b,", 200), "tracestate",
			"tracestate from Producer.TraceContext is given without a traceparent"},
		{"unprintable tracestate alone", "", "a=1\r\n", "tracestate",
			"tracestate from Producer.TraceContext is given without a traceparent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeDB{}
			tx := begin(t, f)
			p, _ := New(Postgres, "")
			p.TraceContext = func(context.Context) (string, string) { return c.traceparent, c.tracestate }
			batch := events("live", "t", 3)
			batch[0].TraceParent = spanB // has its own: the hook is not asked
			n, err := p.EnqueueBatch(context.Background(), tx, batch)
			if n != 0 {
				t.Fatalf("%d inserted", n)
			}
			wantFieldError(t, f, err, 1, "t-1", c.field, "")
			if !strings.Contains(err.Error(), `outbox: event #1 (id "t-1"): `+c.message) {
				t.Fatalf("message %q does not say %q", err, c.message)
			}
		})
	}
}

func TestHookErrorNamesAGeneratedID(t *testing.T) {
	e := Event{EventType: "RoomGiftSent", RoomID: "room-1"}
	_, err := prepare(context.Background(), 0, e, 1_700_000_000_000, func(context.Context) (string, string) {
		return "garbage", ""
	})
	var fe *FieldError
	if !errors.As(err, &fe) || !eventIDPattern.MatchString(fe.EventID) || fe.Field != "traceparent" {
		t.Fatalf("got %v", err)
	}
}

// tracestateMembers returns n members "<key><i>=<i, padded with 0s>", each chars characters long.
func tracestateMembers(key string, n, chars int) []string {
	members := make([]string, n)
	for i := range members {
		prefix := fmt.Sprintf("%s%d=", key, i)
		members[i] = prefix + fmt.Sprintf("%0*d", chars-len(prefix), i)
	}
	return members
}

// The cutting the Python (fit_tracestate) and TypeScript (fitTracestate) libraries do, with
// their tests' cases.
func TestFitTracestate(t *testing.T) {
	// Python: 7 members of 63 characters and one of 204 in second place.
	seven := tracestateMembers("m", 7, 63)
	// Python: 6 members of 103 characters, 4 fit.
	six := tracestateMembers("m", 6, 103)
	// TypeScript: long1 (146), 8 members of 48, long2 (136), 3 of 43.
	ts := append(append(append([]string{"long1=" + strings.Repeat("l", 140)},
		tracestateMembers("k", 8, 48)...), "long2="+strings.Repeat("m", 130)),
		tracestateMembers("t", 3, 43)...)
	tsKept := append([]string{}, ts[1:9]...) // both long members go, then the last ones until 512 fit
	for _, member := range ts[10:] {
		if len(strings.Join(append(tsKept, member), ",")) > maxTracestateChars {
			break
		}
		tsKept = append(tsKept, member)
	}
	// No member over 128 (128 is not over it): 128+128+127+126 characters and 3 commas are
	// exactly 512, the fifth member goes.
	exact := []string{"a=" + strings.Repeat("1", 126), "b=" + strings.Repeat("2", 126),
		"c=" + strings.Repeat("3", 125), "d=" + strings.Repeat("4", 124)}
	// A member of 129 characters is long: it goes before the later, shorter ones.
	long129 := []string{"a=" + strings.Repeat("1", 127), "l=" + strings.Repeat("x", 127), "b=" + strings.Repeat("2", 126),
		"c=" + strings.Repeat("3", 125)}
	cases := []struct {
		name, header, want string
	}{
		{"short", "a=1,b=2", "a=1,b=2"},
		{"empty", "", ""},
		{"exactly 512", "k=" + strings.Repeat("v", 510), "k=" + strings.Repeat("v", 510)},
		{"fits: spaces and empty members kept", " a=1 ,, b=2 ", " a=1 ,, b=2 "},
		{"long member first", strings.Join(append([]string{seven[0], "big=" + strings.Repeat("x", 200)}, seven[1:]...), ","),
			strings.Join(seven, ",")},
		{"then from the end, spaces around members dropped", strings.Join(six, " , "), strings.Join(six[:4], ",")},
		{"long members last first, then from the end", strings.Join(ts, ","), strings.Join(tsKept, ",")},
		{"the result is exactly 512", strings.Join(append(exact, "e=5"), ","), strings.Join(exact, ",")},
		{"129 is long", strings.Join(long129, ","), strings.Join([]string{long129[0], long129[2], long129[3]}, ",")},
		{"one member over 512", "big=" + strings.Repeat("x", 600), ""},
		{"513 characters in one member", "k=" + strings.Repeat("v", 511), ""},
		{"empty members and whitespace dropped when cut",
			",, \t" + strings.Join(six, " ,\t, ,") + " ,,", strings.Join(six[:4], ",")},
		{"only commas and spaces", strings.Repeat(" , ", 200), ""},
		{"not printable", "k=v\n", ""},
		{"tab inside, fits", "a=1,\tb=2", ""},
		{"not ASCII", "k=é", ""},
		{"not UTF-8", "k=\xff", ""},
		{"not printable, cut away", strings.Join(append(six[:5], "k=é\x7f"), ","), strings.Join(six[:4], ",")},
		{"not printable, left after the cut", strings.Join(append([]string{"k=\x7f"}, six...), ","), ""},
		{"tabs and newlines around members are whitespace", "\n" + strings.Join(six, "\t,\r\n"), strings.Join(six[:4], ",")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := fitTracestate(c.header)
			if got != c.want {
				t.Fatalf("fitTracestate(%q)\n= %q\nwant %q", c.header, got, c.want)
			}
			if len(got) > maxTracestateChars || tracestateProblem(got) != "" {
				t.Fatalf("%q (%d characters) cannot be a tracestate", got, len(got))
			}
		})
	}
	if got := fitTracestate(strings.Join(append(exact, "e=5"), ",")); len(got) != maxTracestateChars {
		t.Fatalf("%d characters, want exactly %d", len(got), maxTracestateChars)
	}
}

func TestHookTracestateIsCutNotRefused(t *testing.T) {
	six := tracestateMembers("m", 6, 103)
	cases := []struct {
		name, tracestate, want string
	}{
		{"over 512: cut by whole members", strings.Join(six, ","), strings.Join(six[:4], ",")},
		{"one member over 512: dropped", "k=" + strings.Repeat("v", 511), ""},
		{"control characters: dropped", "a=1\r\n", ""},
		{"not ASCII: dropped", "rojo=é", ""},
		{"valid: as it is", stateA, stateA},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeDB{}
			tx := begin(t, f)
			p, _ := New(SQLite, "")
			p.TraceContext = func(context.Context) (string, string) { return spanA, c.tracestate }
			batch := events("live", "t", 2)
			if n, err := p.EnqueueBatch(context.Background(), tx, batch); n != 2 || err != nil {
				t.Fatalf("%d, %v", n, err)
			}
			for i := range batch {
				if got, want := f.keys[[2]string{"live", batch[i].EventID}], tracedEnvelope(i, spanA, c.want); string(got) != string(want) {
					t.Errorf("event %d: envelope %x, want %x", i, got, want)
				}
			}

			// The same tracestate given on the event is used as it is: refused when invalid.
			e := validEvent()
			e.TraceParent, e.TraceState = spanA, c.tracestate
			_, err := prepare(context.Background(), 0, e, 0, p.TraceContext)
			if c.want == c.tracestate {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantFieldError(t, nil, err, 0, "e-1", "tracestate", "")
			if strings.Contains(err.Error(), "Producer.TraceContext") {
				t.Fatalf("message %q blames the hook", err)
			}
		})
	}
}
