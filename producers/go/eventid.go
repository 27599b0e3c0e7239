package outbox

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// NewEventID returns a new time-ordered event id for the UTC millisecond ms: "evt_", ms as 13
// lowercase hex digits, then 16 lowercase hex digits that are random for the first id of a
// millisecond and one more than the previous id's for the next ids of the same millisecond, so
// ids made in one millisecond sort in the order they were made (the host claims rows of one
// created_at_ms in event_id order). Negative ms count as 0. Safe for concurrent use: one
// generator serves the whole process.
func NewEventID(ms int64) string {
	return defaultIDs.next(ms)
}

// defaultIDs is the process-wide generator behind NewEventID.
var defaultIDs = &idGenerator{random: randomTail}

// idGenerator makes event ids; it remembers the millisecond and tail of the last id it made.
type idGenerator struct {
	mu     sync.Mutex
	random func() uint64
	used   bool
	lastMS int64
	tail   uint64
}

// next returns the generator's next id for millisecond ms.
func (g *idGenerator) next(ms int64) string {
	if ms < 0 {
		ms = 0
	}
	g.mu.Lock()
	if g.used && g.lastMS == ms && g.tail < math.MaxUint64 {
		g.tail++
	} else {
		g.tail = g.random()
	}
	g.used, g.lastMS = true, ms
	tail := g.tail
	g.mu.Unlock()
	return fmt.Sprintf("evt_%013x%016x", ms, tail)
}

// randomTail returns 64 random bits from crypto/rand.
func randomTail() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// The kernel's random source does not fail on any platform Go supports; newer Go
		// versions make crypto/rand.Read panic the same way.
		panic("outbox: crypto/rand failed: " + err.Error())
	}
	return binary.BigEndian.Uint64(b[:])
}
