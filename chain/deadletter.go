package chain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Dead-letter headers, added after the original record's headers.
const (
	HeaderDLQReason    = "differential-dlq-reason"
	HeaderDLQTopic     = "differential-dlq-topic"
	HeaderDLQPartition = "differential-dlq-partition"
	HeaderDLQOffset    = "differential-dlq-offset"
	HeaderDLQStage     = "differential-dlq-stage"
	// HeaderDLQTruncated is present when the dead letter is not the whole
	// record; its value lists what was cut: "value", and when that was not
	// enough also "headers" (the original record's headers dropped),
	// "reason" and "key" (cut to their first KiB).
	HeaderDLQTruncated = "differential-dlq-truncated"
	// HeaderDLQOriginalSize and HeaderDLQOriginalSHA256 describe the original
	// value of a truncated dead letter: its length in bytes and the
	// hexadecimal SHA-256 of its bytes (the record is still in the input
	// topic at the offset named, until retention deletes it).
	HeaderDLQOriginalSize   = "differential-dlq-original-size"
	HeaderDLQOriginalSHA256 = "differential-dlq-original-sha256"
)

const (
	// DefaultMaxDeadLetterBytes is the default bound of a dead letter's key,
	// value and headers together (WithMaxDeadLetterBytes): below sarama's
	// default Producer.MaxMessageBytes (1,000,000) and Kafka's default
	// message.max.bytes with room for the record's own overhead.
	DefaultMaxDeadLetterBytes = 960 << 10
	// MinDeadLetterBytes bounds the minimal dead letter, produced when Kafka
	// refuses a dead letter for its size: the source, the reason (at least
	// its first KiB), the size and hash of the value, and as much of the
	// value as fits. Any broker accepts it.
	MinDeadLetterBytes = 4 << 10
)

// DeadLetter builds the dead letter of record r for topic: its original key,
// value and headers, plus the reason, the source topic/partition/offset and
// the stage in headers (DESIGN I7). When key, value and headers together
// exceed maxBytes, the value is cut to fit, and the headers
// HeaderDLQTruncated, HeaderDLQOriginalSize and HeaderDLQOriginalSHA256 say
// so; if the rest alone is too large, the original headers are dropped and
// the key and the reason cut to their first KiB. A record too large for the dead-letter topic is
// thus still dead-lettered, and its partition goes on (a record that cannot
// be dead-lettered would stop the partition at every restart).
func DeadLetter(topic, stage string, r *Record, reason error, maxBytes int) Message {
	h := make([]Header, 0, len(r.Headers)+5)
	h = append(h, r.Headers...)
	h = append(h,
		Header{Key: []byte(HeaderDLQReason), Value: []byte(reason.Error())},
		Header{Key: []byte(HeaderDLQTopic), Value: []byte(r.Topic)},
		Header{Key: []byte(HeaderDLQPartition), Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		Header{Key: []byte(HeaderDLQOffset), Value: strconv.AppendInt(nil, r.Offset, 10)},
		Header{Key: []byte(HeaderDLQStage), Value: []byte(stage)},
	)
	return truncateDeadLetter(Message{Topic: topic, Key: r.Key, Value: r.Value, Headers: h}, maxBytes)
}

// ProduceDeadLetter produces the dead letter m through p and calls done as
// Producer.Produce does. If Kafka or the client refuses m for its size (an
// error wrapping ErrMessageTooLarge: the dead-letter topic's limit is below
// the chain's WithMaxDeadLetterBytes), it produces once more the minimal
// dead letter (MinDeadLetterBytes) and reports that attempt's result.
func ProduceDeadLetter(ctx context.Context, p Producer, m Message, done func(error)) {
	p.Produce(ctx, []Message{m}, func(err error) {
		if err == nil || !errors.Is(err, ErrMessageTooLarge) || size(&m) <= MinDeadLetterBytes {
			done(err)
			return
		}
		small := truncateDeadLetter(m, MinDeadLetterBytes)
		// Not on this goroutine: done callbacks must not block, and Produce
		// may wait for room in the producer's buffer.
		go p.Produce(ctx, []Message{small}, done)
	})
}

// size is what a message weighs against a limit: key, value and headers.
func size(m *Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

const truncatedPart = 1 << 10 // what the minimal dead letter keeps of key and reason

// truncateDeadLetter returns m cut to at most limit bytes (see DeadLetter):
// the value first; if the rest alone is too large, the original headers are
// dropped and the key and reason cut to their first KiB, and the value gets
// what room is left. m's slices are not modified; m may already be
// truncated (its original size and hash headers are kept).
func truncateDeadLetter(m Message, limit int) Message {
	if size(&m) <= limit {
		return m
	}
	var cut []string
	h := make([]Header, 0, len(m.Headers)+3)
	origin := false
	for _, x := range m.Headers {
		switch string(x.Key) {
		case HeaderDLQTruncated:
			cut = strings.Split(string(x.Value), ",")
			continue
		case HeaderDLQOriginalSize:
			origin = true
		}
		h = append(h, x)
	}
	if !origin {
		sum := sha256.Sum256(m.Value)
		h = append(h,
			Header{Key: []byte(HeaderDLQOriginalSize), Value: strconv.AppendInt(nil, int64(len(m.Value)), 10)},
			Header{Key: []byte(HeaderDLQOriginalSHA256), Value: []byte(hex.EncodeToString(sum[:]))})
	}
	mark := func(what string) {
		if !slices.Contains(cut, what) {
			cut = append(cut, what)
		}
	}
	mark("value")
	value := m.Value
	out := Message{Topic: m.Topic, Key: m.Key, Headers: h}
	// room is what the value may take: the limit less everything else,
	// the marker header at its longest included.
	const markerLen = len(HeaderDLQTruncated) + len("value,headers,reason,key")
	room := func() int { return limit - size(&out) - markerLen }
	if room() < 0 {
		mark("headers")
		kept := out.Headers[:0:0]
		for _, x := range out.Headers {
			if bytes.HasPrefix(x.Key, []byte("differential-dlq-")) {
				if string(x.Key) == HeaderDLQReason && len(x.Value) > truncatedPart {
					mark("reason")
					x.Value = x.Value[:truncatedPart]
				}
				kept = append(kept, x)
			}
		}
		out.Headers = kept
		if len(out.Key) > truncatedPart {
			mark("key")
			out.Key = out.Key[:truncatedPart]
		}
	}
	out.Value = value[:min(len(value), max(0, room()))]
	out.Headers = append(out.Headers, Header{Key: []byte(HeaderDLQTruncated), Value: []byte(strings.Join(cut, ","))})
	return out
}
