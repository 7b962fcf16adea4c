package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/differential-dev/differential/internal/workload"
)

// count formats n with thousands separators: 1234567 -> "1,234,567".
func count[T ~int | ~int64](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// rate formats a per-second rate compactly: 950, 15.2k, 1.25M.
func rate(r float64) string {
	switch {
	case r != r || r < 0: // NaN
		return "0"
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// kindSummary counts generated records by their top-level kind.
func kindSummary(recs []workload.Record) string {
	order := []string{"click", "install", "purchase", "dup", "malformed"}
	n := map[string]int{}
	for k, c := range workload.CountKinds(recs) {
		top, _, _ := strings.Cut(k, "/")
		n[top] += c
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		parts = append(parts, k+" "+count(n[k]))
	}
	return strings.Join(parts, ", ")
}
