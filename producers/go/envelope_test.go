package outbox

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"
)

// goldenFile is the shared golden vectors file (producers/golden/envelopes.json).
const goldenFile = "../golden/envelopes.json"

// golden is the part of the golden file the Go tests read.
type golden struct {
	Cases []struct {
		Name  string `json:"name"`
		Event struct {
			AppCode      string `json:"app_code"`
			EventID      string `json:"event_id"`
			RoomID       string `json:"room_id"`
			EventType    string `json:"event_type"`
			RoomVersion  string `json:"room_version"`
			OccurredAtMS string `json:"occurred_at_ms"`
			BodyHex      string `json:"body_hex"`
		} `json:"event"`
		EnvelopeHex string `json:"envelope_hex"`
	} `json:"cases"`
	EventIDPrefixes []struct {
		MS     string `json:"ms"`
		Prefix string `json:"prefix"`
	} `json:"event_id_prefixes"`
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
	if len(g.Cases) < 5 || len(g.EventIDPrefixes) < 3 {
		t.Fatalf("%s holds %d cases and %d prefixes: too few", goldenFile, len(g.Cases), len(g.EventIDPrefixes))
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
			}.marshal()
			if hex.EncodeToString(got) != c.EnvelopeHex {
				t.Errorf("envelope\n got %x\nwant %s", got, c.EnvelopeHex)
			}
		})
	}
}

// Every golden case that is a writable event (non-empty tenant, type and room) comes out of the
// path Enqueue takes (defaults, checks, encoding) as the golden bytes.
func TestPreparedRowCarriesTheGoldenEnvelope(t *testing.T) {
	checked := 0
	for _, c := range loadGolden(t).Cases {
		e := c.Event
		if e.AppCode == "" || e.EventType == "" || e.RoomID == "" || e.EventID == "" {
			continue
		}
		ms := mustInt64(t, e.OccurredAtMS)
		r, err := prepare(0, Event{
			AppCode:     e.AppCode,
			EventID:     e.EventID,
			EventType:   e.EventType,
			RoomID:      e.RoomID,
			RoomVersion: mustInt64(t, e.RoomVersion),
			OccurredAt:  time.UnixMilli(ms),
			Body:        mustHex(t, e.BodyHex),
		}, 12345)
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
	}
	if checked < 5 {
		t.Fatalf("only %d golden cases are writable events", checked)
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
