package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
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
