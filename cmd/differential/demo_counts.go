package main

import (
	"fmt"
	"io"
	"time"

	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// demoTypes are the event types in chain order.
var demoTypes = []string{attribution.TypeClick, attribution.TypeInstall, attribution.TypePurchase}

// typeCounts holds one count per event type.
type typeCounts map[string]int

func (c typeCounts) sum() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// demoCounts reconciles the generated workload with what the rules make of
// it. The generator's "dup" records are resends of earlier valid events
// (same key and value, later in the log); a resend is a duplicate only
// while the original is within the dedup horizon, so older resends are
// processed as new events and have outputs of their own. Every input
// record is exactly one of: invalid, a skipped duplicate, or processed —
// and a processed record is either an original or a resend.
type demoCounts struct {
	records int
	// original counts the valid records the generator wrote once, by type;
	// resent the valid "dup" records, by type.
	original, resent typeCounts
	// skipped counts the duplicates the rules skip, by type; processed the
	// valid records that are not duplicates, split into originals and
	// resends.
	skipped                            typeCounts
	processedOriginal, processedResent typeCounts
	invalid                            int
	malformed                          int // generated as malformed
}

// countDemo classifies every input record of every partition (inputs as
// workload.Split gives them) with the model's results for them.
func countDemo(recs []workload.Record, results []reference.Result, rules attribution.Config) demoCounts {
	c := demoCounts{records: len(recs), original: typeCounts{}, resent: typeCounts{}, skipped: typeCounts{},
		processedOriginal: typeCounts{}, processedResent: typeCounts{}}
	dup := make([]map[int64]bool, len(results))
	for p, res := range results {
		dup[p] = make(map[int64]bool, len(res.Duplicates))
		for _, o := range res.Duplicates {
			dup[p][o] = true
		}
	}
	for i := range recs {
		r := &recs[i]
		if len(r.Kind) >= len("malformed") && r.Kind[:len("malformed")] == "malformed" {
			c.malformed++
		}
		ev, err := reference.Parse(&r.Record, rules)
		if err != nil {
			c.invalid++
			continue
		}
		resend := r.Kind == "dup"
		if resend {
			c.resent[ev.Type]++
		} else {
			c.original[ev.Type]++
		}
		switch {
		case int(r.Partition) < len(dup) && dup[r.Partition][r.Offset]:
			c.skipped[ev.Type]++
		case resend:
			c.processedResent[ev.Type]++
		default:
			c.processedOriginal[ev.Type]++
		}
	}
	return c
}

// processed is how many records of type t the stages acted on.
func (c *demoCounts) processed(t string) int { return c.processedOriginal[t] + c.processedResent[t] }

// report writes the lines that explain the counts: records in, what the
// duplicates and resends became, and where each output came from. Every
// total printed is the sum of the parts beside it.
func (c *demoCounts) report(w io.Writer, horizon time.Duration, outputs, installs, purchases, deadLettered int) {
	byType := func(m typeCounts) string {
		return fmt.Sprintf("%s clicks, %s installs, %s purchases",
			count(m[attribution.TypeClick]), count(m[attribution.TypeInstall]), count(m[attribution.TypePurchase]))
	}
	fmt.Fprintf(w, "  records in      %s = %s events written once (%s) + %s resends of earlier events (dup) + %s invalid\n",
		count(c.records), count(c.original.sum()), byType(c.original), count(c.resent.sum()), count(c.invalid))
	fmt.Fprintf(w, "  duplicates      %s skipped, no output: an event already seen within the dedup horizon (%s) of stream time (%s)\n",
		count(c.skipped.sum()), formatDuration(horizon), byType(c.skipped))
	fmt.Fprintf(w, "  late resends    %s processed as new events: resent after the horizon, the first copy forgotten (%s)\n",
		count(c.processedResent.sum()), byType(c.processedResent))
	fmt.Fprintf(w, "  outputs         %s = %s installs (%s written once + %s late resends) + %s purchases (%s + %s); clicks have no output\n",
		count(outputs),
		count(installs), count(c.processedOriginal[attribution.TypeInstall]), count(c.processedResent[attribution.TypeInstall]),
		count(purchases), count(c.processedOriginal[attribution.TypePurchase]), count(c.processedResent[attribution.TypePurchase]))
	fmt.Fprintf(w, "  dead-lettered   %s: every invalid record (%s generated as malformed)\n", count(deadLettered), count(c.malformed))
}
