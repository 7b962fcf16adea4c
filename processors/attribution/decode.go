package attribution

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/differential-dev/differential/chain"
)

// MinTime and MaxTime bound valid event times (exclusive). The engine keeps
// stream times as Unix nanoseconds starting from 0 ("no valid record yet"),
// so an event time must have a positive Unix-nanosecond value to take part
// in stream time exactly as DESIGN.md "Attribution rules" defines it.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Decoder returns the chain.Decoder of the attribution events (DESIGN.md "Attribution rules").
// It panics if cfg is invalid (see Config.Validate).
//
// A record is valid when its value, at most MaxRecordBytes long, is one JSON
// object (syntax as encoding/json accepts it, nesting up to 10000) where:
//   - "event_id" and "user_id" are non-empty strings;
//   - "type" is "click", "install" or "purchase";
//   - "time" is an RFC 3339 string (as Go's time.RFC3339 parser accepts it),
//     not more than MaxClockSkew after the record's Kafka timestamp (the check
//     is skipped when the record has no timestamp, i.e. a zero Timestamp),
//     and strictly between MinTime and MaxTime;
//   - a click has a non-empty "campaign_id";
//   - a purchase has a numeric "revenue" >= 0 (within float64 range) and a
//     "currency" of exactly three ASCII letters;
//   - the Kafka key equals user_id (see below).
//
// Field names match exactly (case-sensitive); unknown fields are ignored
// whatever their value; when a name repeats, the last one counts. The schema
// fields (event_id, type, user_id, time, campaign_id, channel, revenue,
// currency) must have their JSON type (string; revenue a number) whatever
// the event type, or be null, which counts as absent.
//
// Key: DESIGN.md "Attribution rules" says key = user_id, and the engine runs records of one
// Kafka key in order while different keys may run in parallel. The
// processors keep per-user state (read-modify-write of the "c/"+user_id buckets and
// "i/"+user_id), so a record whose key differs from its user_id could race
// with the user's other records (and would usually sit in another
// partition than the user's other events). Such records are therefore
// invalid (dead-lettered), not silently re-keyed.
//
// Decode returns Decoded{Type, Time (UTC), Payload: *Event}. Errors wrap
// ErrInvalid and read "invalid attribution event: <reason>".
func Decoder(cfg Config) chain.Decoder {
	cfg.mustValidate("attribution.Decoder")
	return &decoder{maxBytes: cfg.MaxRecordBytes, skew: cfg.MaxClockSkew}
}

type decoder struct {
	maxBytes int
	skew     time.Duration
}

// field identifies a schema field.
type field uint8

const (
	fUnknown field = iota
	fEventID
	fType
	fUserID
	fTime
	fCampaignID
	fChannel
	fRevenue
	fCurrency
	numFields
)

var fieldNames = [numFields]string{"", "event_id", "type", "user_id", "time", "campaign_id", "channel", "revenue", "currency"}

func fieldOf(name string) field {
	switch name {
	case "event_id":
		return fEventID
	case "type":
		return fType
	case "user_id":
		return fUserID
	case "time":
		return fTime
	case "campaign_id":
		return fCampaignID
	case "channel":
		return fChannel
	case "revenue":
		return fRevenue
	case "currency":
		return fCurrency
	}
	return fUnknown
}

// JSON value kinds.
const (
	kAbsent byte = iota
	kString
	kNumber
	kBool
	kNull
	kObject
	kArray
)

var kindNames = [...]string{"absent", "string", "number", "boolean", "null", "object", "array"}

// span is the last value seen for a field: for strings the bytes between
// the quotes, for numbers the literal.
type span struct {
	start, end int
	kind       byte
	slow       bool // string has escapes or invalid UTF-8: decode with encoding/json
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func (d *decoder) Decode(r *chain.Record) (chain.Decoded, error) {
	b := r.Value
	if len(b) > d.maxBytes {
		return chain.Decoded{}, invalid("value is %d bytes, more than MaxRecordBytes (%d)", len(b), d.maxBytes)
	}
	var spans [numFields]span
	if err := scanObject(b, &spans); err != nil {
		return chain.Decoded{}, err
	}
	for f := fEventID; f < numFields; f++ {
		sp := spans[f]
		if sp.kind == kNull {
			spans[f].kind = kAbsent
			continue
		}
		want := kString
		if f == fRevenue {
			want = kNumber
		}
		if sp.kind != kAbsent && sp.kind != want {
			return chain.Decoded{}, invalid("%s must be a %s, got %s", fieldNames[f], kindNames[want], kindNames[sp.kind])
		}
	}

	// Copy the strings we keep into one allocation; escaped or non-ASCII
	// strings are decoded by encoding/json (exact JSON semantics).
	var strs [numFields]string
	var stack [256]byte
	buf := stack[:0]
	var pos [numFields][2]int
	for f := fEventID; f < numFields; f++ {
		sp := spans[f]
		if sp.kind == kAbsent || (sp.kind == kString && sp.slow) {
			continue
		}
		pos[f][0] = len(buf)
		buf = append(buf, b[sp.start:sp.end]...)
		pos[f][1] = len(buf)
	}
	all := string(buf)
	for f := fEventID; f < numFields; f++ {
		sp := spans[f]
		switch {
		case sp.kind == kAbsent:
		case sp.kind == kString && sp.slow:
			s, err := slowString(b[sp.start-1 : sp.end+1])
			if err != nil {
				return chain.Decoded{}, invalid("%s: %w", fieldNames[f], err)
			}
			strs[f] = s
		default:
			strs[f] = all[pos[f][0]:pos[f][1]]
		}
	}

	ev := &Event{EventID: strs[fEventID], UserID: strs[fUserID], CampaignID: strs[fCampaignID],
		Channel: strs[fChannel], Currency: strs[fCurrency], RevenueText: strs[fRevenue]}
	if ev.EventID == "" {
		return chain.Decoded{}, invalid("event_id must be a non-empty string")
	}
	if ev.UserID == "" {
		return chain.Decoded{}, invalid("user_id must be a non-empty string")
	}
	switch typ := strs[fType]; typ {
	case TypeClick:
		ev.Type = TypeClick
	case TypeInstall:
		ev.Type = TypeInstall
	case TypePurchase:
		ev.Type = TypePurchase
	case "":
		return chain.Decoded{}, invalid("type is missing (want click, install or purchase)")
	default:
		return chain.Decoded{}, invalid("type %q is not click, install or purchase", typ)
	}
	ts := strs[fTime]
	if ts == "" {
		return chain.Decoded{}, invalid("time is missing (want an RFC 3339 string)")
	}
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return chain.Decoded{}, invalid("time %q is not RFC 3339", ts)
	}
	ev.Time = t.UTC()
	if !ev.Time.After(MinTime) || !ev.Time.Before(MaxTime) {
		return chain.Decoded{}, invalid("time %s is outside the supported range (after %s, before %s)",
			ts, MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))
	}
	if !r.Timestamp.IsZero() && ev.Time.Sub(r.Timestamp) > d.skew {
		return chain.Decoded{}, invalid("time %s is %v after the record timestamp %s (MaxClockSkew %v)",
			ts, ev.Time.Sub(r.Timestamp), r.Timestamp.UTC().Format(time.RFC3339Nano), d.skew)
	}
	switch ev.Type {
	case TypeClick:
		if ev.CampaignID == "" {
			return chain.Decoded{}, invalid("click needs a non-empty campaign_id")
		}
	case TypePurchase:
		if spans[fRevenue].kind == kAbsent {
			return chain.Decoded{}, invalid("purchase needs revenue (a number >= 0)")
		}
		v, err := strconv.ParseFloat(ev.RevenueText, 64)
		if err != nil {
			return chain.Decoded{}, invalid("revenue %s is out of range", ev.RevenueText)
		}
		if v < 0 {
			return chain.Decoded{}, invalid("revenue %s is negative", ev.RevenueText)
		}
		ev.Revenue = v
		if !isCurrency(ev.Currency) {
			return chain.Decoded{}, invalid("currency %q is not a 3-letter code", ev.Currency)
		}
	}
	if string(r.Key) != ev.UserID {
		return chain.Decoded{}, invalid("kafka key %q differs from user_id %q", r.Key, ev.UserID)
	}
	return chain.Decoded{Type: ev.Type, Time: ev.Time, Payload: ev}, nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		c := s[i] | 0x20 // lower case
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

func slowString(quoted []byte) (string, error) {
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", err
	}
	return s, nil
}

// maxDepth is encoding/json's nesting limit (containers, the top object included).
const maxDepth = 10000

// scanner is a validating JSON scanner for one top-level object; it records
// the last value of each schema field in spans and skips everything else.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(msg string) error {
	return invalid("value is not valid JSON: %s at byte %d", msg, s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func scanObject(b []byte, spans *[numFields]span) error {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) {
		return invalid("value is empty (want a JSON object)")
	}
	if b[s.i] != '{' {
		// Tell "not an object" apart from "not JSON".
		if err := s.value(0); err != nil {
			return err
		}
		if s.ws(); s.i != len(b) {
			return s.fail("data after the top-level value")
		}
		return invalid("value is a JSON %s, not an object", kindNames[kindOf(b[skipWS(b)])])
	}
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
	} else {
		for {
			if s.i >= len(b) || b[s.i] != '"' {
				return s.fail("expected a member name")
			}
			start, end, slow, err := s.str()
			if err != nil {
				return err
			}
			var f field
			if !slow {
				f = fieldOf(string(b[start:end]))
			} else if name, err := slowString(b[start-1 : end+1]); err == nil {
				f = fieldOf(name)
			}
			s.ws()
			if s.i >= len(b) || b[s.i] != ':' {
				return s.fail("expected ':'")
			}
			s.i++
			s.ws()
			if s.i >= len(b) {
				return s.fail("unexpected end")
			}
			vstart := s.i
			kind := kindOf(b[s.i])
			var sp span
			if kind == kString {
				st, en, sl, err := s.str()
				if err != nil {
					return err
				}
				sp = span{start: st, end: en, kind: kString, slow: sl}
			} else {
				if err := s.value(1); err != nil {
					return err
				}
				sp = span{start: vstart, end: s.i, kind: kind}
			}
			if f != fUnknown {
				spans[f] = sp
			}
			s.ws()
			if s.i >= len(b) {
				return s.fail("unexpected end")
			}
			if b[s.i] == ',' {
				s.i++
				s.ws()
				continue
			}
			if b[s.i] == '}' {
				s.i++
				break
			}
			return s.fail("expected ',' or '}'")
		}
	}
	s.ws()
	if s.i != len(b) {
		return s.fail("data after the top-level value")
	}
	return nil
}

func skipWS(b []byte) int {
	s := scanner{b: b}
	s.ws()
	return s.i
}

func kindOf(c byte) byte {
	switch {
	case c == '"':
		return kString
	case c == '-' || (c >= '0' && c <= '9'):
		return kNumber
	case c == 't' || c == 'f':
		return kBool
	case c == 'n':
		return kNull
	case c == '{':
		return kObject
	case c == '[':
		return kArray
	}
	return kAbsent
}

// str scans the string starting at s.b[s.i] == '"' and returns the bounds of
// its contents; slow reports escapes or invalid UTF-8.
func (s *scanner) str() (start, end int, slow bool, err error) {
	b := s.b
	s.i++
	start = s.i
	nonASCII := false
	for s.i < len(b) {
		c := b[s.i]
		switch {
		case c == '"':
			end = s.i
			s.i++
			// Valid UTF-8 without escapes is the string itself; encoding/json
			// would replace invalid UTF-8, so that goes the slow way.
			if nonASCII && !slow && !utf8.Valid(b[start:end]) {
				slow = true
			}
			return start, end, slow, nil
		case c == '\\':
			slow = true
			s.i++
			if s.i >= len(b) {
				return 0, 0, false, s.fail("unexpected end in string")
			}
			switch b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for k := 0; k < 4; k++ {
					if s.i >= len(b) || !isHex(b[s.i]) {
						return 0, 0, false, s.fail("invalid \\u escape")
					}
					s.i++
				}
			default:
				return 0, 0, false, s.fail("invalid escape")
			}
		case c < 0x20:
			return 0, 0, false, s.fail("control character in string")
		case c >= utf8.RuneSelf:
			nonASCII = true
			s.i++
		default:
			s.i++
		}
	}
	return 0, 0, false, s.fail("unexpected end in string")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (s *scanner) num() error {
	b := s.b
	if b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(b) {
		return s.fail("unexpected end in number")
	}
	switch {
	case b[s.i] == '0':
		s.i++
	case b[s.i] >= '1' && b[s.i] <= '9':
		for s.i < len(b) && isDigit(b[s.i]) {
			s.i++
		}
	default:
		return s.fail("invalid number")
	}
	if s.i < len(b) && b[s.i] == '.' {
		s.i++
		if s.i >= len(b) || !isDigit(b[s.i]) {
			return s.fail("invalid number")
		}
		for s.i < len(b) && isDigit(b[s.i]) {
			s.i++
		}
	}
	if s.i < len(b) && (b[s.i] == 'e' || b[s.i] == 'E') {
		s.i++
		if s.i < len(b) && (b[s.i] == '+' || b[s.i] == '-') {
			s.i++
		}
		if s.i >= len(b) || !isDigit(b[s.i]) {
			return s.fail("invalid number")
		}
		for s.i < len(b) && isDigit(b[s.i]) {
			s.i++
		}
	}
	return nil
}

func (s *scanner) lit(want string) error {
	if len(s.b)-s.i < len(want) || string(s.b[s.i:s.i+len(want)]) != want {
		return s.fail("invalid literal")
	}
	s.i += len(want)
	return nil
}

// scalar scans a string, number or literal at s.i.
func (s *scanner) scalar() error {
	switch s.b[s.i] {
	case '"':
		_, _, _, err := s.str()
		return err
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	}
	if kindOf(s.b[s.i]) == kNumber {
		return s.num()
	}
	return s.fail("invalid character")
}

// value scans any JSON value at s.i (after whitespace) inside outer open
// containers. Containers are scanned iteratively with a bit stack
// (1 = object).
func (s *scanner) value(outer int) error {
	b := s.b
	if s.i >= len(b) {
		return s.fail("unexpected end")
	}
	if c := b[s.i]; c != '{' && c != '[' {
		return s.scalar()
	}
	var stack [maxDepth/64 + 1]uint64
	n := 0 // containers open in this call
	isObj := func() bool { return stack[(n-1)/64]&(1<<((n-1)%64)) != 0 }
	open := func(obj bool) error {
		if outer+n+1 > maxDepth {
			return s.fail("exceeded max depth")
		}
		w, bit := n/64, uint64(1)<<(n%64)
		if obj {
			stack[w] |= bit
		} else {
			stack[w] &^= bit
		}
		n++
		s.i++
		return nil
	}
	key := func() error {
		if s.i >= len(b) || b[s.i] != '"' {
			return s.fail("expected a member name")
		}
		if _, _, _, err := s.str(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(b) || b[s.i] != ':' {
			return s.fail("expected ':'")
		}
		s.i++
		s.ws()
		return nil
	}
	for {
		// At the start of a value.
		if s.i >= len(b) {
			return s.fail("unexpected end")
		}
		c := b[s.i]
		if c == '{' || c == '[' {
			if err := open(c == '{'); err != nil {
				return err
			}
			s.ws()
			if s.i >= len(b) {
				return s.fail("unexpected end")
			}
			if (c == '{' && b[s.i] == '}') || (c == '[' && b[s.i] == ']') {
				s.i++
				n--
			} else {
				if c == '{' {
					if err := key(); err != nil {
						return err
					}
				}
				continue
			}
		} else if err := s.scalar(); err != nil {
			return err
		}
		// After a value: close containers or move to the next element.
		for {
			if n == 0 {
				return nil
			}
			s.ws()
			if s.i >= len(b) {
				return s.fail("unexpected end")
			}
			c := b[s.i]
			if c == ',' {
				s.i++
				s.ws()
				if isObj() {
					if err := key(); err != nil {
						return err
					}
				}
				break
			}
			if (isObj() && c == '}') || (!isObj() && c == ']') {
				s.i++
				n--
				continue
			}
			return s.fail("expected ',' or a closing bracket")
		}
	}
}
