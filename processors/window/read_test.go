package window

import (
	"testing"
	"time"
)

func TestCountAt(t *testing.T) {
	c, err := New(Config{Name: "v", Window: time.Hour, Bucket: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var v value
	for _, d := range []time.Duration{0, time.Minute, 30 * time.Minute} {
		v.add(base.Add(d).UnixNano() / c.b)
	}
	enc := v.encode(nil)
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{{-time.Minute, 0}, {0, 1}, {time.Minute, 2}, {59 * time.Minute, 3}, {60 * time.Minute, 2}, {90 * time.Minute, 0}} {
		if n, err := c.CountAt(enc, base.Add(tc.at)); err != nil || n != tc.want {
			t.Errorf("CountAt(+%v) = %d, %v; want %d", tc.at, n, err, tc.want)
		}
	}
	if n, err := c.CountAt(nil, base); n != 0 || err != nil {
		t.Errorf("CountAt(no value) = %d, %v", n, err)
	}
	if _, err := c.CountAt([]byte{9}, base); err == nil {
		t.Error("a corrupt value counted")
	}
}
