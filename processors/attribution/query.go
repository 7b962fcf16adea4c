package attribution

import (
	"fmt"
	"time"

	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/processors/window"
)

// StateReader is a read-only, consistent view of one partition's persisted
// state (store.PartitionSnapshot): the stages' own keys and checkpoints.
type StateReader interface {
	Get(key []byte) ([]byte, bool, error)
	Scan(lo, hi []byte, fn func(key, value []byte) bool) error
	Checkpoint(stage string) (commit.Checkpoint, bool, error)
}

// StagePosition is a stage's checkpoint in a StateReader: every record of
// the partition below Offset is in the state read, none at or after it
// (Offset 0 and a zero Watermark: the stage has none persisted).
type StagePosition struct {
	Offset    int64
	Watermark time.Time
}

// UserState is a user's attribution state, as one StateReader holds it.
type UserState struct {
	UserID string
	// Clicks are the user's stored clicks that an install can still be
	// attributed to at the click stage's watermark S (S − time ≤ Lookback +
	// Lateness), by (time, offset).
	Clicks []StoredClick
	// Installs are the user's stored installs that a purchase can still be
	// attributed to at the install stage's watermark S (S − time ≤
	// InstallRetention), by offset.
	Installs []StoredInstall
	// Velocity is the user's click count in the velocity window at the
	// velocity stage's watermark (nil without the velocity stage).
	Velocity *VelocityCount
	// Stages are the positions the parts were read at: StageClick for
	// Clicks, StageInstall for Installs, StageVelocity for Velocity.
	Stages map[string]StagePosition
}

// VelocityCount is a user's click count over the velocity window.
type VelocityCount struct {
	// Window is Velocity.Window, formatted by window.FormatDuration.
	Window string
	Count  int64
	// Threshold is the count above which a click raises an alert.
	Threshold int64
}

// Offset is the smallest of the stages' positions: every record of the
// partition below it is reflected in every part of s.
func (s *UserState) Offset() int64 {
	first, min := true, int64(0)
	for _, p := range s.Stages {
		if first || p.Offset < min {
			first, min = false, p.Offset
		}
	}
	return min
}

// QueryUser reads user's state from r with the rules cfg (those the chain
// runs with): each part at its stage's checkpoint.
func QueryUser(r StateReader, cfg Config, user string) (UserState, error) {
	s := UserState{UserID: user, Stages: map[string]StagePosition{}}
	pos := func(stage string) (StagePosition, error) {
		cp, ok, err := r.Checkpoint(stage)
		if err != nil {
			return StagePosition{}, fmt.Errorf("attribution: checkpoint of stage %s: %w", stage, err)
		}
		p := StagePosition{}
		if ok {
			p.Offset = cp.Next
			if cp.Watermark != 0 {
				p.Watermark = time.Unix(0, cp.Watermark).UTC()
			}
		}
		s.Stages[stage] = p
		return p, nil
	}
	click, err := pos(StageClick)
	if err != nil {
		return s, err
	}
	lo := appendUser(nil, ClickKeyPrefix, user)
	n := len(lo)
	if !click.Watermark.IsZero() {
		lo = appendBE(lo, max(click.Watermark.Add(-cfg.clickWindow()).UnixNano(), 0))
	}
	hi := userEnd(ClickKeyPrefix, user)
	if err := scan(r, lo, hi, func(k, v []byte) error {
		c, err := decodeClick(k[n:], v)
		if err != nil {
			return err
		}
		s.Clicks = append(s.Clicks, StoredClick{UserID: user, EventID: string(c.eventID), Offset: c.offset,
			Time: time.Unix(0, c.time).UTC(), Arrival: time.Unix(0, c.arrival).UTC(),
			CampaignID: string(c.campaign), Channel: string(c.channel)})
		return nil
	}); err != nil {
		return s, err
	}
	install, err := pos(StageInstall)
	if err != nil {
		return s, err
	}
	lo = appendUser(nil, InstallKeyPrefix, user)
	n = len(lo)
	hi = userEnd(InstallKeyPrefix, user)
	if err := scan(r, lo, hi, func(k, v []byte) error {
		in, err := decodeInstall(k[n:], v)
		if err != nil {
			return err
		}
		t := time.Unix(0, in.time).UTC()
		if install.Watermark.IsZero() || usable(t, install.Watermark, cfg.InstallRetention) {
			s.Installs = append(s.Installs, StoredInstall{UserID: user, EventID: string(in.eventID), Offset: in.offset,
				Time: t, CampaignID: string(in.campaign)})
		}
		return nil
	}); err != nil {
		return s, err
	}
	if !cfg.Velocity.Enabled() {
		return s, nil
	}
	vel, err := pos(StageVelocity)
	if err != nil {
		return s, err
	}
	v := cfg.Velocity
	c, err := window.New(window.Config{Name: StageVelocity, Window: v.Window, Bucket: v.Bucket, Lateness: v.Lateness})
	if err != nil {
		return s, err
	}
	s.Velocity = &VelocityCount{Window: window.FormatDuration(v.Window), Threshold: v.Threshold}
	key := c.StateKey(user)
	stored, ok, err := r.Get(key)
	if err != nil {
		return s, fmt.Errorf("attribution: get %q: %w", key, err)
	}
	if ok && !vel.Watermark.IsZero() {
		if s.Velocity.Count, err = c.CountAt(stored, vel.Watermark); err != nil {
			return s, corrupt(key, err)
		}
	}
	return s, nil
}

// userEnd is an upper bound of the user's keys under prefix: every one is
// the length-prefixed id and at most 16 bytes (time, offset).
func userEnd(prefix, user string) []byte {
	k := appendUser(nil, prefix, user)
	for range 17 {
		k = append(k, 0xff)
	}
	return k
}

// scan calls fn with the entries of [lo, hi) that belong to the key range
// (the user's length prefix makes it exact); fn's error stops it.
func scan(r StateReader, lo, hi []byte, fn func(k, v []byte) error) error {
	var ferr error
	err := r.Scan(lo, hi, func(k, v []byte) bool {
		if ferr = fn(k, v); ferr != nil {
			ferr = corrupt(k, ferr)
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("attribution: scan %q: %w", lo, err)
	}
	return ferr
}
