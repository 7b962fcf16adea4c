package kafka

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/internal/kfetch"
)

// DefaultProbeInterval is how often a claimed partition's leader is asked
// for its high watermark (Config.ProbeInterval).
const DefaultProbeInterval = time.Second

// leaderProbe asks a claimed partition's leader for its high watermark
// (ListOffsets, latest) every interval, on the commit client (which never
// long-polls). It tells the health check two things the claim alone cannot:
//
//   - when the leader last answered (LeaderContact): a partition whose
//     leader is gone fetches nothing, so the claim's high watermark stops
//     and its lag looks like zero; a leader that answers nothing new is
//     merely idle;
//   - the leader's current high watermark, which the source reports when it
//     is above the claim's last fetched one, so a consumer that stopped
//     fetching from a live leader shows its lag.
//
// One request is outstanding at a time: a request to a paused broker waits
// for the client's read timeout, and the contact simply ages meanwhile.
type leaderProbe struct {
	client    sarama.Client
	topic     string
	partition int32
	interval  time.Duration
	now       func() time.Time

	contact atomic.Int64 // unix nanos of the last answer (or of the claim's start)
	hwm     atomic.Int64 // the last answered high watermark, -1 none
}

func newLeaderProbe(client sarama.Client, topic string, partition int32, interval time.Duration) *leaderProbe {
	p := &leaderProbe{client: client, topic: topic, partition: partition, interval: interval, now: time.Now}
	// A new claim counts as contact: its partition consumer just found the
	// leader, and nothing is stale before a full interval passed.
	p.contact.Store(p.now().UnixNano())
	p.hwm.Store(-1)
	return p
}

// run probes until ctx ends.
func (p *leaderProbe) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = p.probeOnce()
	}
}

// probeOnce asks the leader once. GetOffset refreshes the topic's metadata
// and retries once when the cached leader fails, so a moved leader is found
// by the next probe at the latest.
func (p *leaderProbe) probeOnce() error {
	off, err := p.client.GetOffset(p.topic, p.partition, sarama.OffsetNewest)
	if err != nil {
		return err
	}
	p.answered(off)
	return nil
}

// answered records an answer with high watermark hwm (-1: none).
func (p *leaderProbe) answered(hwm int64) {
	p.contact.Store(p.now().UnixNano())
	for {
		cur := p.hwm.Load()
		if hwm <= cur || p.hwm.CompareAndSwap(cur, hwm) {
			return
		}
	}
}

// LeaderContact is when the leader last answered.
func (p *leaderProbe) LeaderContact() time.Time { return time.Unix(0, p.contact.Load()) }

// start runs the probe on a goroutine of wg until ctx ends.
func (p *leaderProbe) start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { p.run(ctx) })
}

// pendingCommits tracks since when a commit has been waiting for the group
// coordinator's acknowledgement (chain.CommitPending).
type pendingCommits struct {
	now   func() time.Time // nil: time.Now
	since atomic.Int64     // unix nanos of the first unacknowledged attempt, 0 none
}

// begin notes an attempt; the oldest unacknowledged one counts.
func (p *pendingCommits) begin() {
	now := time.Now
	if p.now != nil {
		now = p.now
	}
	p.since.CompareAndSwap(0, now().UnixNano())
}

// end notes an attempt's result: an acknowledgement clears the pending
// state, a failure keeps it (the next interval retries).
func (p *pendingCommits) end(err error) {
	if err == nil {
		p.since.Store(0)
	}
}

// CommitPendingSince implements chain.CommitPending.
func (p *pendingCommits) CommitPendingSince() time.Time {
	if n := p.since.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// ConfirmEnd implements chain.EndConfirmer (the idle release's check that
// the log holds nothing the claim has not delivered): it reads the
// partition from offset from with Fetch requests that do not wait, through
// the polling client at the consumer's isolation level, and reports
// whether a record the claim would deliver lies at or after from. Control
// batches (transaction markers) are stepped over, and under read_committed
// the records of aborted transactions, which the claim never delivers; a
// read_committed fetch stops at the last stable offset, so a transaction
// still open is not "more" either. The answer's high watermark also counts
// as a probe answer (HighWatermark, LeaderContact).
//
// The requests run on their own goroutine: sarama's Fetch takes no
// context, and a leader that does not answer holds it for the client's read
// timeout. When ctx ends first ConfirmEnd returns at once and the goroutine
// ends with the request (the client's timeout, or Run closing the client).
func (s *claimSource) ConfirmEnd(ctx context.Context, from int64) (end int64, more bool, err error) {
	type answer struct {
		hwm, end int64
		more     bool
		err      error
	}
	ch := make(chan answer, 1)
	go func() {
		var a answer
		a.hwm, a.end, a.more, a.err = readEnd(ctx, s.poll.client, s.claim.Topic(), s.claim.Partition(), from)
		ch <- a
	}()
	select {
	case a := <-ch:
		if a.err == nil && s.probe != nil {
			s.probe.answered(a.hwm)
		}
		return a.end, a.more, a.err
	case <-ctx.Done():
		return -1, false, ctx.Err()
	}
}

// readEnd reads topic/partition from offset from until it finds a record a
// consumer at the client's isolation level would be delivered (more), or
// reaches end: the high watermark, under read_committed the last stable
// offset. A tail of markers and aborted batches larger than one fetch takes
// more than one request; a batch larger than the fetch size grows the size
// as the polling reader does.
func readEnd(ctx context.Context, client sarama.Client, topic string, partition int32, from int64) (hwm, end int64, more bool, err error) {
	conf := client.Config()
	filter := kfetch.Filter{ReadCommitted: conf.Consumer.IsolationLevel == sarama.ReadCommitted}
	maxBytes := conf.Consumer.Fetch.Default
	for off := from; ; {
		if err := ctx.Err(); err != nil {
			return -1, -1, false, err
		}
		broker, err := client.Leader(topic, partition)
		if err != nil {
			return -1, -1, false, err
		}
		req := kfetch.NewRequest(conf, topic, partition, off, maxBytes)
		req.MinBytes, req.MaxWaitTime = 0, 0 // answer now, even with nothing to return
		resp, err := broker.Fetch(req)
		if err != nil {
			_ = broker.Close() // reopened by the next Leader call (as the polling reader does)
			return -1, -1, false, err
		}
		block, err := kfetch.Block(resp, topic, partition)
		if err != nil {
			return -1, -1, false, err
		}
		hwm, end = block.HighWaterMarkOffset, kfetch.End(block, filter.ReadCommitted)
		next, err := filter.Records(block, off, math.MaxInt64, func(*sarama.RecordBatch, *sarama.Record) { more = true })
		if err != nil {
			return -1, -1, false, err
		}
		if more || next >= end {
			return hwm, end, more, nil
		}
		if next == off {
			// Nothing came back whole: the next batch is larger than the
			// byte limit.
			limit := conf.Consumer.Fetch.Max
			if limit > 0 && maxBytes >= limit {
				return -1, -1, false, fmt.Errorf("%w: a batch at offset %d exceeds Consumer.Fetch.Max (%d bytes)", sarama.ErrMessageTooLarge, off, limit)
			}
			maxBytes = min(2*maxBytes, sarama.MaxResponseSize)
			if limit > 0 {
				maxBytes = min(maxBytes, limit)
			}
		}
		off = next
	}
}
