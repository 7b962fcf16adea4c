package reference_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

func alert(user, window string, count int, at time.Duration, id string) string {
	return fmt.Sprintf(`{"kind":"click_velocity","user_id":%q,"window":%q,"count":%d,"time":%q,"event_id":%q}`,
		user, window, count, tf(at), id)
}

// TestVelocityRule pins the velocity rule on hand-computed logs: threshold
// 2 in a 1h window of 1m buckets, lateness 30m.
func TestVelocityRule(t *testing.T) {
	cfg := cfgWith(func(c *attribution.Config) {
		c.Velocity = attribution.VelocityConfig{Window: hour, Bucket: minute, Lateness: 30 * minute, Threshold: 2}
	})
	for _, tc := range []struct {
		name string
		log  []string
		want []out
	}{
		{"third click in the hour alerts once", []string{
			click("c1", "u1", 0, "A"), click("c2", "u1", 10*minute, "A"), click("c3", "u1", 20*minute, "A"),
			click("c4", "u1", 30*minute, "A"), click("x1", "u2", 30*minute, "A"),
		}, []out{{2, alert("u1", "1h", 3, 20*minute, "c3")}}},
		{"buckets: the oldest bucket counts whole", []string{
			// 10:00:30 and 10:59:59 are in buckets 0 and 59: in the window of 10:59:59.
			click("c1", "u1", 30*time.Second, "A"), click("c2", "u1", 50*minute, "A"), click("c3", "u1", 59*minute+59*time.Second, "A"),
			// 11:00:10 is in bucket 60: bucket 0 is out, count 3 (c2, c3, c4).
			click("c4", "u1", 60*minute+10*time.Second, "A"),
		}, []out{{2, alert("u1", "1h", 3, 59*minute+59*time.Second, "c3")}}},
		{"one alert per window of stream time, then again", []string{
			click("c1", "u1", 0, "A"), click("c2", "u1", minute, "A"), click("c3", "u1", 2*minute, "A"), // count 3: alert, A = 10:02
			click("c4", "u1", 30*minute, "A"),   // count 4, 28m after the alert: none
			click("c5", "u1", 61*minute, "A"),   // buckets 10:02–11:01: c3, c4, c5 = 3, 59m after: none
			click("c6", "u1", 62*minute, "A"),   // buckets 10:03–11:02: c4, c5, c6 = 3, 1h after: alert
			click("c7", "u1", 62*minute+1, "A"), // 4, 1ns after the alert: none
		}, []out{{2, alert("u1", "1h", 3, 2*minute, "c3")}, {5, alert("u1", "1h", 3, 62*minute, "c6")}}},
		{"duplicates and late clicks are not counted", []string{
			click("c1", "u1", 0, "A"), click("c1", "u1", 0, "A"), click("c2", "u1", 40*minute, "A"),
			click("late", "u1", 9*minute, "A"), // S − t = 31m > 30m: not counted
			click("c3", "u1", 41*minute, "A"),  // c1, c2, c3: alert
		}, []out{{4, alert("u1", "1h", 3, 41*minute, "c3")}}},
		{"clicks at smaller offsets but later times do not count", []string{
			click("c1", "u1", 40*minute, "A"), click("c2", "u1", 45*minute, "A"),
			click("c0", "u1", 20*minute, "A"), // S − t = 25m: counted, but its window ends at 10:20: count 1
		}, nil},
		{"a late click alerts with the counts before it", []string{
			click("c1", "u1", 10*minute, "A"), click("c2", "u1", 15*minute, "A"), click("x", "u2", 30*minute, "A"),
			click("c0", "u1", 20*minute, "A"), // S = 10:30, t = 10:20: window (9:20, 10:20] = c1, c2, c0
		}, []out{{3, alert("u1", "1h", 3, 20*minute, "c0")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := reference.Run(log(tc.log...), cfg)
			require.Equal(t, tc.want, outs(res.Alerts))
			for _, a := range res.Alerts {
				require.Equal(t, "u1", string(a.Key))
			}
		})
	}
	res := reference.Run(log(click("c1", "u1", 0, "A"), click("c2", "u1", 0, "A"), click("c3", "u1", 0, "A")), attribution.DefaultConfig())
	require.Empty(t, res.Alerts, "no alerts when the velocity stage is off")
}
