package workload

import "time"

// spam adds a click burst of user before an install at ti: 20–150 clicks
// (kind "click/spam", each possibly late like any click) spread over 10–60
// minutes that end 1–48 hours before ti — what the attribution chain's
// velocity stage alerts on.
func (g *gen) spam(user string, ti time.Time) {
	n := 20 + g.rng.IntN(131)
	span := g.uniform(10*time.Minute, time.Hour)
	end := ti.Add(-g.uniform(time.Hour, 2*day))
	for k := 0; k < n; k++ {
		g.click(user, end.Add(-g.uniform(0, span)), "click/spam")
	}
}
