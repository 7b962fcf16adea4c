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

// State keys (the engine scopes them to the partition).
const (
	// ClickKeyPrefix + user_id + "#" + bucket (8 bytes, big-endian): the
	// user's stored clicks whose time falls in that bucket (a Lookback/8
	// slice of event time), in offset order. Bucketing keeps the cost of
	// storing a click independent of how many clicks a busy user has, and
	// lets a whole bucket expire at once.
	ClickKeyPrefix = "c/"
	// InstallKeyPrefix + user_id: the user's stored installs, in offset order.
	InstallKeyPrefix = "i/"
	// SeenKeyPrefix + type + "/" + event_id: the latest event time of the
	// non-duplicate records with that (type, event_id).
	SeenKeyPrefix = "d/"
)

// stateVersion is the first byte of every state value.
const stateVersion = 1

var errCorrupt = errors.New("corrupt state value")

// clickKeySuffix is the length of "#" + bucket.
const clickKeySuffix = 9

func clickKey(user string, bucket int64) []byte {
	k := make([]byte, 0, len(ClickKeyPrefix)+len(user)+clickKeySuffix)
	k = append(k, ClickKeyPrefix...)
	k = append(k, user...)
	k = append(k, '#')
	return binary.BigEndian.AppendUint64(k, uint64(bucket))
}

func installKey(user string) []byte { return append([]byte(InstallKeyPrefix), user...) }
func seenKey(typ, id string) []byte {
	k := make([]byte, 0, len(SeenKeyPrefix)+len(typ)+1+len(id))
	k = append(k, SeenKeyPrefix...)
	k = append(k, typ...)
	k = append(k, '/')
	return append(k, id...)
}

// Encoding (all integers varints):
//
//	seen value:    version, time (unix ns)
//	click bucket:  version, last offset (8 bytes), { offset, time, arrival, len+event_id, len+campaign_id, len+channel }*
//	install list:  version, { offset, time, len+event_id, len+campaign_id }*

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

func (r *reader) time() time.Time { return time.Unix(0, r.varint()).UTC() }

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

// Click buckets start with a header: version, then the offset of the last
// click appended (8 bytes, big-endian), so a repeated Process of the same
// record is recognised without decoding the bucket.
const clickHeaderLen = 1 + 8

func newClickReader(v []byte) (*reader, error) {
	if len(v) < clickHeaderLen || v[0] != stateVersion {
		return nil, errCorrupt
	}
	return &reader{b: v[clickHeaderLen:]}, nil
}

func lastClickOffset(v []byte) int64 { return int64(binary.BigEndian.Uint64(v[1:clickHeaderLen])) }

func newReader(v []byte) (*reader, error) {
	if len(v) == 0 || v[0] != stateVersion {
		return nil, errCorrupt
	}
	return &reader{b: v[1:]}, nil
}

func encodeSeen(t time.Time) []byte { return appendTimeNS([]byte{stateVersion}, t) }

func decodeSeen(v []byte) (time.Time, error) {
	r, err := newReader(v)
	if err != nil {
		return time.Time{}, err
	}
	t := r.time()
	if r.err == nil && len(r.b) != 0 {
		r.err = errCorrupt
	}
	return t, r.err
}

// clickView is one stored click, its strings still pointing into the value.
type clickView struct {
	offset                     int64
	time, arrival              time.Time
	eventID, campaign, channel []byte
	raw                        []byte // the encoded entry
}

func (r *reader) click() (c clickView) {
	start := r.b
	c.offset = r.varint()
	c.time = r.time()
	c.arrival = r.time()
	c.eventID = r.bytes()
	c.campaign = r.bytes()
	c.channel = r.bytes()
	if r.err == nil {
		c.raw = start[:len(start)-len(r.b)]
	}
	return c
}

func appendClick(b []byte, offset int64, t, arrival time.Time, e *Event) []byte {
	b = appendVarint(b, offset)
	b = appendTimeNS(b, t)
	b = appendTimeNS(b, arrival)
	b = appendBytes(b, e.EventID)
	b = appendBytes(b, e.CampaignID)
	return appendBytes(b, e.Channel)
}

// installView is one stored install.
type installView struct {
	offset            int64
	time              time.Time
	eventID, campaign []byte
	raw               []byte
}

func (r *reader) install() (i installView) {
	start := r.b
	i.offset = r.varint()
	i.time = r.time()
	i.eventID = r.bytes()
	i.campaign = r.bytes()
	if r.err == nil {
		i.raw = start[:len(start)-len(r.b)]
	}
	return i
}

func appendInstall(b []byte, offset int64, t time.Time, eventID, campaign string) []byte {
	b = appendVarint(b, offset)
	b = appendTimeNS(b, t)
	b = appendBytes(b, eventID)
	return appendBytes(b, campaign)
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
			if len(k) < len(ClickKeyPrefix)+clickKeySuffix || k[len(k)-clickKeySuffix] != '#' {
				return s, fmt.Errorf("key %q: %w", k, errCorrupt)
			}
			user := k[len(ClickKeyPrefix) : len(k)-clickKeySuffix]
			r, err := newClickReader(v)
			if err != nil {
				return s, fmt.Errorf("key %q: %w", k, err)
			}
			for len(r.b) > 0 && r.err == nil {
				c := r.click()
				if r.err != nil {
					break
				}
				s.Clicks = append(s.Clicks, StoredClick{UserID: user, EventID: string(c.eventID), Offset: c.offset,
					Time: c.time, Arrival: c.arrival, CampaignID: string(c.campaign), Channel: string(c.channel)})
			}
			if r.err != nil {
				return s, fmt.Errorf("key %q: %w", k, r.err)
			}
		case strings.HasPrefix(k, InstallKeyPrefix):
			user := k[len(InstallKeyPrefix):]
			r, err := newReader(v)
			if err != nil {
				return s, fmt.Errorf("key %q: %w", k, err)
			}
			for len(r.b) > 0 && r.err == nil {
				i := r.install()
				if r.err != nil {
					break
				}
				s.Installs = append(s.Installs, StoredInstall{UserID: user, EventID: string(i.eventID),
					Offset: i.offset, Time: i.time, CampaignID: string(i.campaign)})
			}
			if r.err != nil {
				return s, fmt.Errorf("key %q: %w", k, r.err)
			}
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
