package bench

import (
	"fmt"
	"math"
	"time"

	"github.com/differential-dev/differential/internal/workload"
)

// A point's input is a stream: one generated log with its start-up and
// wind-down cut off, so that every prefix of it is the same stream, only
// longer or shorter. Each design run consumes a prefix sized by its own
// throughput (see sizeFor), so every run lasts Options.Duration or more.
//
// Why cut: the generator's journeys start (install) uniformly in [Start,
// Start+Span); a journey's clicks come up to 10 days before its install
// and its purchases mostly within 9 days after (5% 25–40 days). So the
// log's records before Start are clicks only, purchases build up over the
// first days after Start, clicks thin out over the last 10 days before
// Start+Span, and after it come purchases only: a short prefix of the raw
// log would be a different workload from a long one. The records with
// timestamps in [Start+10d, Start+Span−10d) are the steady part: clicks,
// installs and (all but a few percent of) purchases at their steady rates.
// And Span grows with the record count (streamDensity), so that the state
// a user keeps within the 7-day lookback, and with it the processors' cost
// per record, does not grow with the input's size: a longer input is more
// of the same stream, not a denser one.

const (
	// streamDensity is the generator's records per day of event time: the
	// density of the earlier benchmark's workload B (50,000 records over 21
	// days).
	streamDensity = 50_000.0 / 21
	// streamCut is what is cut off each end of the generated log.
	streamCut = 10 * day
	day       = 24 * time.Hour
)

// streamStart is the generator's Start: in the past, so that a real broker
// accepts every timestamp (it rejects those more than an hour ahead of its
// clock); newStream moves it earlier for an input that would reach today.
var streamStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// cutRecords is about what the cut costs in generated records: 20 days
// plus the clicks before Start and the purchases after Start+Span.
var cutRecords = streamDensity * 27

// stream is one point's steady log, and the inputs cut from it.
type stream struct {
	wc   workload.Config // the generator's configuration (Records: generated)
	recs []workload.Record
	// kept is what the generated log was cut to: [from, to).
	from, to time.Time
	inputs   map[int]*input // by prefix length
}

// newStream generates a steady log of at least n records for wc's shape
// (wc.Records and wc.Span are set here).
func newStream(wc workload.Config, n int) *stream {
	for gen := n + int(cutRecords); ; gen = gen * 5 / 4 {
		wc.Records = gen
		wc.Start = streamStart
		wc.Span = max(2*streamCut+day, time.Duration(float64(gen)/streamDensity*float64(day)))
		if end := wc.Start.Add(wc.Span + 45*day); end.After(time.Now()) {
			// Keep every timestamp in the past (see streamStart): start as
			// much earlier as needed.
			wc.Start = wc.Start.Add(-end.Sub(time.Now())).Truncate(day)
		}
		s := &stream{wc: wc, from: wc.Start.Add(streamCut), to: wc.Start.Add(wc.Span - streamCut), inputs: map[int]*input{}}
		s.recs = steady(workload.Generate(wc), wc.Partitions, s.from, s.to)
		if len(s.recs) >= n {
			return s
		}
	}
}

// steady keeps the records whose timestamp is in [from, to), in order, with
// each partition's offsets renumbered from 0.
func steady(recs []workload.Record, partitions int, from, to time.Time) []workload.Record {
	out := recs[:0]
	next := make([]int64, partitions)
	for _, r := range recs {
		if r.Timestamp.Before(from) || !r.Timestamp.Before(to) {
			continue
		}
		r.Offset = next[r.Partition]
		next[r.Partition]++
		out = append(out, r)
	}
	return out
}

func (s *stream) String() string {
	return fmt.Sprintf("%s; steady part [%s, %s): %d records",
		s.wc, s.from.Format(time.DateOnly), s.to.Format(time.DateOnly), len(s.recs))
}

// input is a prefix of a stream in a topic of its own, and what the model
// says of it (built when first needed).
type input struct {
	n     int
	recs  []workload.Record
	ends  []int64
	topic string
	exp   *expectation
}

// sizeFor is the prefix length for a design expected to run at rate
// records/s: Duration's worth with a margin, plus one of its batches (a
// micro-batch's last one may be partial), rounded up to a step of the
// ladder 1000·√2^k so that designs of similar speed share an input.
func (o Options) sizeFor(rate float64, batch int) int {
	want := rate*o.Duration.Seconds()*1.25 + float64(batch)
	return ladder(want)
}

// ladder rounds n up to the next 1000·√2^k (at least 1000).
func ladder(n float64) int {
	k := math.Ceil(2 * math.Log2(max(n, 1000)/1000))
	v := 1000 * math.Pow(2, k/2)
	return int(math.Round(v/10) * 10)
}
