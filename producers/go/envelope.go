package outbox

// envelope is outbox.v1.EventEnvelope (proto/outbox/v1/envelope.proto), the bytes stored in the
// row's envelope column.
type envelope struct {
	appCode      string // field 1
	eventID      string // field 2
	roomID       string // field 3
	eventType    string // field 4
	roomVersion  int64  // field 5
	occurredAtMS int64  // field 6
	body         []byte // field 7
	traceparent  string // field 8
	tracestate   string // field 9
}

// Protobuf wire types used by the envelope.
const (
	wireVarint = 0
	wireBytes  = 2
)

// marshal encodes the envelope in the protobuf wire format, as every protobuf library does for
// proto3: fields in number order, fields holding their zero value left out, int64 as a varint of
// its two's complement (10 bytes when negative). An envelope without a trace context (empty
// traceparent and tracestate) is byte for byte what it was before fields 8 and 9 existed.
func (e envelope) marshal() []byte {
	size := len(e.appCode) + len(e.eventID) + len(e.roomID) + len(e.eventType) + len(e.body) +
		len(e.traceparent) + len(e.tracestate) + 9*(1+10)
	out := make([]byte, 0, size)
	out = appendBytesField(out, 1, []byte(e.appCode))
	out = appendBytesField(out, 2, []byte(e.eventID))
	out = appendBytesField(out, 3, []byte(e.roomID))
	out = appendBytesField(out, 4, []byte(e.eventType))
	out = appendVarintField(out, 5, uint64(e.roomVersion))
	out = appendVarintField(out, 6, uint64(e.occurredAtMS))
	out = appendBytesField(out, 7, e.body)
	out = appendBytesField(out, 8, []byte(e.traceparent))
	out = appendBytesField(out, 9, []byte(e.tracestate))
	return out
}

// appendBytesField appends a length-delimited field (string or bytes) unless value is empty.
func appendBytesField(out []byte, field int, value []byte) []byte {
	if len(value) == 0 {
		return out
	}
	out = appendVarint(out, uint64(field<<3|wireBytes))
	out = appendVarint(out, uint64(len(value)))
	return append(out, value...)
}

// appendVarintField appends a varint field unless value is zero.
func appendVarintField(out []byte, field int, value uint64) []byte {
	if value == 0 {
		return out
	}
	out = appendVarint(out, uint64(field<<3|wireVarint))
	return appendVarint(out, value)
}

// appendVarint appends value as a base-128 varint, least significant group first.
func appendVarint(out []byte, value uint64) []byte {
	for value >= 0x80 {
		out = append(out, byte(value)|0x80)
		value >>= 7
	}
	return append(out, byte(value))
}
