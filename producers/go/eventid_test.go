package outbox

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// eventIDPattern is the shape of a generated id.
var eventIDPattern = regexp.MustCompile(`^evt_[0-9a-f]{13}[0-9a-f]{16}$`)

func TestEventIDFormat(t *testing.T) {
	ms := time.Date(2024, 12, 1, 0, 0, 0, 123e6, time.UTC).UnixMilli()
	id := NewEventID(ms)
	if !eventIDPattern.MatchString(id) || len(id) != 33 {
		t.Fatalf("id %q does not match %s", id, eventIDPattern)
	}
	if got, _ := strconv.ParseInt(id[4:17], 16, 64); got != ms {
		t.Fatalf("id %q carries ms %d, want %d", id, got, ms)
	}
}

func TestEventIDGoldenPrefixes(t *testing.T) {
	for _, p := range loadGolden(t).EventIDPrefixes {
		id := NewEventID(mustInt64(t, p.MS))
		if id[:len(p.Prefix)] != p.Prefix || !eventIDPattern.MatchString(id) {
			t.Errorf("NewEventID(%s) = %q, want prefix %q", p.MS, id, p.Prefix)
		}
	}
}

func TestEventIDNegativeMillisecondsClampToZero(t *testing.T) {
	if id := NewEventID(-5); id[:17] != "evt_0000000000000" {
		t.Fatalf("NewEventID(-5) = %q", id)
	}
}

func TestEventIDsOfOneMillisecondSortInTheOrderTheyWereMade(t *testing.T) {
	g := &idGenerator{random: randomTail}
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = g.next(5000)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			t.Fatalf("id %d %q is not after id %d %q", i, ids[i], i-1, ids[i-1])
		}
		prev, _ := strconv.ParseUint(ids[i-1][17:], 16, 64)
		cur, _ := strconv.ParseUint(ids[i][17:], 16, 64)
		if cur != prev+1 {
			t.Fatalf("tail %x follows %x: want +1", cur, prev)
		}
	}
	// Ids of a later millisecond sort after, whatever their random tail.
	if later := g.next(5001); later <= ids[len(ids)-1] {
		t.Fatalf("id of ms 5001 %q sorts before %q", later, ids[len(ids)-1])
	}
}

func TestEventIDTailIsRandomPerMillisecond(t *testing.T) {
	tails := map[string]bool{}
	for ms := int64(0); ms < 200; ms++ {
		tails[NewEventID(1_700_000_000_000 + ms)[17:]] = true
	}
	if len(tails) < 199 {
		t.Fatalf("200 milliseconds gave only %d distinct first tails", len(tails))
	}
}

func TestEventIDTailAtMaximumStartsAfresh(t *testing.T) {
	values := []uint64{math.MaxUint64 - 1, 42}
	g := &idGenerator{random: func() uint64 { v := values[0]; values = values[1:]; return v }}
	got := []string{g.next(7), g.next(7), g.next(7)}
	want := []string{
		"evt_0000000000007fffffffffffffffe",
		"evt_0000000000007ffffffffffffffff",
		"evt_0000000000007000000000000002a",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("id %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestEventIDsAreUniqueAcrossGoroutines(t *testing.T) {
	const goroutines, perGoroutine = 8, 2000
	shared := time.Now().UnixMilli() - 10_000
	for _, mixed := range []bool{false, true} {
		results := make([][]string, goroutines)
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < perGoroutine; i++ {
					ms := shared
					if mixed && i%2 == 1 {
						ms = time.Now().UnixMilli()
					}
					results[g] = append(results[g], NewEventID(ms))
				}
			}(g)
		}
		wg.Wait()
		seen := map[string]bool{}
		for _, ids := range results {
			for _, id := range ids {
				if seen[id] || !eventIDPattern.MatchString(id) {
					t.Fatalf("mixed=%v: duplicate or malformed id %q", mixed, id)
				}
				seen[id] = true
			}
			// On one millisecond only, each goroutine's ids increase in the order it made them.
			if !mixed && !sort.StringsAreSorted(ids) {
				t.Fatalf("one goroutine's ids of one millisecond are out of order")
			}
		}
		if len(seen) != goroutines*perGoroutine {
			t.Fatalf("mixed=%v: %d distinct ids, want %d", mixed, len(seen), goroutines*perGoroutine)
		}
		shared++
	}
}
