package attribution

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/differential-dev/differential/processors/window"
)

// State keys (the engine scopes them to the partition). A user id is
// written length-prefixed (uvarint length, then the bytes), so the keys of
// one user form a contiguous range that no other user's keys enter, and
// times and offsets that follow it (8 bytes big-endian each) sort the range.
const (
	// ClickKeyPrefix + user + time (unix ns) + offset: one stored click.
	// Sorted by (time, offset), so the install rule's winner — the latest
	// candidate, ties to the larger offset — is the first candidate of a
	// reverse scan from the install's time.
	ClickKeyPrefix = "c/"
	// InstallKeyPrefix + user + offset: one stored install. The latest
	// install below a purchase's offset is the first entry of a reverse
	// scan from that offset.
	InstallKeyPrefix = "i/"
	// SeenKeyPrefix + type + "/" + event_id: the latest event time of the
	// non-duplicate records with that (type, event_id).
	SeenKeyPrefix = "d/"
)

// Value versions: the first byte of every state value. Layout 2 (
// one key per click and per install) changed clicks and installs; seen
// values are as in layout 1.
const (
	seenVersion    = 1
	clickVersion   = 2
	installVersion = 2
	// alertVersion: the velocity stage's last alert (v/a/<user_id>).
	alertVersion = 1
)

var errCorrupt = errors.New("corrupt state value")

// appendUser appends prefix and the length-prefixed user id.
func appendUser(dst []byte, prefix, user string) []byte {
	dst = append(dst, prefix...)
	dst = binary.AppendUvarint(dst, uint64(len(user)))
	return append(dst, user...)
}

// appendBE appends v as 8 bytes big-endian (v >= 0 sorts as a number).
func appendBE(dst []byte, v int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(v)) }

// appendClickKey appends the key of the click of user at (time t ns,
// offset).
func appendClickKey(dst []byte, user string, t, offset int64) []byte {
	return appendBE(appendBE(appendUser(dst, ClickKeyPrefix, user), t), offset)
}

// appendInstallKey appends the key of the install of user at offset.
func appendInstallKey(dst []byte, user string, offset int64) []byte {
	return appendBE(appendUser(dst, InstallKeyPrefix, user), offset)
}

// appendSeenKey appends the key of the (typ, id) seen entry.
// seenPrefix is the prefix of the deduplication keys of records of type typ.
func seenPrefix(typ string) string { return SeenKeyPrefix + typ + "/" }

func appendSeenKey(dst []byte, typ, id string) []byte {
	dst = append(dst, SeenKeyPrefix...)
	dst = append(dst, typ...)
	dst = append(dst, '/')
	return append(dst, id...)
}

// splitUserKey splits a click or install key (without its prefix) into the
// user and the n bytes that follow it; ok is false unless exactly n follow.
func splitUserKey(k string, n int) (user, rest string, ok bool) {
	l, m := binary.Uvarint([]byte(k))
	if m <= 0 || l > uint64(len(k)-m) || len(k)-m-int(l) != n {
		return "", "", false
	}
	return k[m : m+int(l)], k[m+int(l):], true
}

// Encoding (integers are varints, strings length-prefixed):
//
//	seen value:    version 1, time (unix ns)
//	click value:   version 2, arrival, event_id, campaign_id, channel
//	               (time and offset are in the key)
//	install value: version 2, time, max time, event_id, campaign_id
//	               (offset in the key; max time: the latest time of the
//	               user's stored installs at offsets up to this one)

func appendVarint(b []byte, v int64) []byte     { return binary.AppendVarint(b, v) }
func appendTimeNS(b []byte, t time.Time) []byte { return binary.AppendVarint(b, t.UnixNano()) }
func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes a state value; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	if r.err != nil {
		return nil
	}
	l, n := binary.Uvarint(r.b)
	if n <= 0 || l > uint64(len(r.b)-n) {
		r.err = errCorrupt
		return nil
	}
	s := r.b[n : n+int(l)]
	r.b = r.b[n+int(l):]
	return s
}

// end reports corruption if bytes are left over.
func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return r.err
}

func newReader(v []byte, version byte) (*reader, error) {
	if len(v) == 0 || v[0] != version {
		return nil, errCorrupt
	}
	return &reader{b: v[1:]}, nil
}

func encodeSeen(t time.Time) []byte {
	return appendTimeNS(append(make([]byte, 0, 1+binary.MaxVarintLen64), seenVersion), t)
}

func decodeSeen(v []byte) (time.Time, error) {
	r, err := newReader(v, seenVersion)
	if err != nil {
		return time.Time{}, err
	}
	t := r.varint()
	return time.Unix(0, t).UTC(), r.end()
}

// clickView is one stored click, its strings still pointing into the key
// and value it was decoded from. Times are unix ns.
type clickView struct {
	offset, time, arrival      int64
	eventID, campaign, channel []byte
}

func encodeClick(arrival time.Time, e *Event) []byte {
	b := make([]byte, 1, 1+binary.MaxVarintLen64+3*binary.MaxVarintLen16+len(e.EventID)+len(e.CampaignID)+len(e.Channel))
	b[0] = clickVersion
	b = appendTimeNS(b, arrival)
	b = appendBytes(b, e.EventID)
	b = appendBytes(b, e.CampaignID)
	return appendBytes(b, e.Channel)
}

// decodeClick decodes a click from the 16 bytes of its key after the user
// (time, offset) and its value.
func decodeClick(suffix, v []byte) (c clickView, err error) {
	if len(suffix) != 16 {
		return c, errCorrupt
	}
	c.time = int64(binary.BigEndian.Uint64(suffix))
	c.offset = int64(binary.BigEndian.Uint64(suffix[8:]))
	r, err := newReader(v, clickVersion)
	if err != nil {
		return c, err
	}
	c.arrival = r.varint()
	c.eventID = r.bytes()
	c.campaign = r.bytes()
	c.channel = r.bytes()
	return c, r.end()
}

// installView is one stored install. Times are unix ns.
type installView struct {
	offset, time, maxTime int64
	eventID, campaign     []byte
}

func encodeInstall(t, maxTime time.Time, eventID, campaign string) []byte {
	b := make([]byte, 1, 1+2*binary.MaxVarintLen64+2*binary.MaxVarintLen16+len(eventID)+len(campaign))
	b[0] = installVersion
	b = appendTimeNS(b, t)
	b = appendTimeNS(b, maxTime)
	b = appendBytes(b, eventID)
	return appendBytes(b, campaign)
}

// decodeInstall decodes an install from the 8 bytes of its key after the
// user (the offset) and its value.
func decodeInstall(suffix, v []byte) (in installView, err error) {
	if len(suffix) != 8 {
		return in, errCorrupt
	}
	in.offset = int64(binary.BigEndian.Uint64(suffix))
	r, err := newReader(v, installVersion)
	if err != nil {
		return in, err
	}
	in.time = r.varint()
	in.maxTime = r.varint()
	in.eventID = r.bytes()
	in.campaign = r.bytes()
	return in, r.end()
}

// StoredClick is a click as the click stage stores it.
type StoredClick struct {
	UserID     string
	EventID    string
	Offset     int64
	Time       time.Time
	Arrival    time.Time // A = max(S(offset), Time)
	CampaignID string
	Channel    string
}

// StoredInstall is an install as the install stage stores it (CampaignID
// empty when it was organic).
type StoredInstall struct {
	UserID     string
	EventID    string
	Offset     int64
	Time       time.Time
	CampaignID string
}

// SeenEvent is a remembered (type, event_id) with the latest event time of
// its non-duplicate records.
type SeenEvent struct {
	Type    string
	EventID string
	Time    time.Time
}

// Snapshot is the logical window state of one partition, sorted: clicks and
// installs by (UserID, Offset), seen events by (Type, EventID).
type Snapshot struct {
	Clicks   []StoredClick
	Installs []StoredInstall
	Seen     []SeenEvent
}

// Sort puts s in its canonical order.
func (s *Snapshot) Sort() {
	sort.Slice(s.Clicks, func(i, j int) bool {
		a, b := s.Clicks[i], s.Clicks[j]
		return a.UserID < b.UserID || (a.UserID == b.UserID && a.Offset < b.Offset)
	})
	sort.Slice(s.Installs, func(i, j int) bool {
		a, b := s.Installs[i], s.Installs[j]
		return a.UserID < b.UserID || (a.UserID == b.UserID && a.Offset < b.Offset)
	})
	sort.Slice(s.Seen, func(i, j int) bool {
		a, b := s.Seen[i], s.Seen[j]
		return a.Type < b.Type || (a.Type == b.Type && a.EventID < b.EventID)
	})
}

// String renders s one entry per line (stable; for comparisons and diffs).
func (s Snapshot) String() string {
	var b strings.Builder
	ts := func(t time.Time) string { return t.UTC().Format(TimeFormat) }
	for _, c := range s.Clicks {
		fmt.Fprintf(&b, "click user=%q id=%q offset=%d time=%s arrival=%s campaign=%q channel=%q\n",
			c.UserID, c.EventID, c.Offset, ts(c.Time), ts(c.Arrival), c.CampaignID, c.Channel)
	}
	for _, i := range s.Installs {
		fmt.Fprintf(&b, "install user=%q id=%q offset=%d time=%s campaign=%q\n",
			i.UserID, i.EventID, i.Offset, ts(i.Time), i.CampaignID)
	}
	for _, d := range s.Seen {
		fmt.Fprintf(&b, "seen type=%s id=%q time=%s\n", d.Type, d.EventID, ts(d.Time))
	}
	return b.String()
}

// SnapshotOf decodes a partition's state entries (key → value, as the
// processors wrote them) into a sorted Snapshot; the velocity stage's
// entries are skipped. It does not drop entries
// that are no longer usable: filter with reference.Usable before comparing
// with the reference model.
func SnapshotOf(entries map[string][]byte) (Snapshot, error) {
	var s Snapshot
	for k, v := range entries {
		switch {
		case strings.HasPrefix(k, ClickKeyPrefix):
			user, rest, ok := splitUserKey(k[len(ClickKeyPrefix):], 16)
			if !ok {
				return s, fmt.Errorf("key %q: %w", k, errCorrupt)
			}
			c, err := decodeClick([]byte(rest), v)
			if err != nil {
				return s, fmt.Errorf("key %q: %w", k, err)
			}
			s.Clicks = append(s.Clicks, StoredClick{UserID: user, EventID: string(c.eventID), Offset: c.offset,
				Time: time.Unix(0, c.time).UTC(), Arrival: time.Unix(0, c.arrival).UTC(),
				CampaignID: string(c.campaign), Channel: string(c.channel)})
		case strings.HasPrefix(k, InstallKeyPrefix):
			user, rest, ok := splitUserKey(k[len(InstallKeyPrefix):], 8)
			if !ok {
				return s, fmt.Errorf("key %q: %w", k, errCorrupt)
			}
			in, err := decodeInstall([]byte(rest), v)
			if err != nil {
				return s, fmt.Errorf("key %q: %w", k, err)
			}
			s.Installs = append(s.Installs, StoredInstall{UserID: user, EventID: string(in.eventID),
				Offset: in.offset, Time: time.Unix(0, in.time).UTC(), CampaignID: string(in.campaign)})
		case strings.HasPrefix(k, SeenKeyPrefix):
			typ, id, ok := strings.Cut(k[len(SeenKeyPrefix):], "/")
			if !ok {
				return s, fmt.Errorf("key %q: %w", k, errCorrupt)
			}
			t, err := decodeSeen(v)
			if err != nil {
				return s, fmt.Errorf("key %q: %w", k, err)
			}
			s.Seen = append(s.Seen, SeenEvent{Type: typ, EventID: id, Time: t})
		case strings.HasPrefix(k, VelocityKeyPrefix), strings.HasPrefix(k, window.KeyPrefix):
			// The velocity stage's state (checked by its own tests).
		default:
			return s, fmt.Errorf("key %q: not an attribution state key", k)
		}
	}
	s.Sort()
	return s, nil
}
