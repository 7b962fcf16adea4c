package liveview

import (
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
)

// TxnTracker is a chain.TxnObserver that keeps what the live view shows of
// the exactly-once cycles: how many committed, how many aborted by cause,
// and the last one. Give it to the chain with Option. TxnEnded runs on the
// chain's coordinator goroutine; it takes a mutex for a few assignments.
type TxnTracker struct {
	now func() time.Time
	mu  struct {
		sync.Mutex
		committed int64
		aborted   map[chain.TxnAbortCause]int64
		last      *TxnCycle
	}
}

// NewTxnTracker returns an empty tracker; now is its clock (nil: time.Now).
func NewTxnTracker(now func() time.Time) *TxnTracker {
	if now == nil {
		now = time.Now
	}
	t := &TxnTracker{now: now}
	t.mu.aborted = map[chain.TxnAbortCause]int64{}
	return t
}

// Option adds the tracker to a chain's observers.
func (t *TxnTracker) Option() chain.Option { return chain.WithObserver(t) }

var _ chain.TxnObserver = (*TxnTracker)(nil)

func (t *TxnTracker) Begin(chain.BeginInfo)                         {}
func (t *TxnTracker) Advanced(string, int32, int, int64, time.Time) {}
func (t *TxnTracker) Committed(string, int32, int64, string)        {}

// TxnEnded records the cycle.
func (t *TxnTracker) TxnEnded(info chain.TxnInfo) {
	c := &TxnCycle{
		Ended: t.now(), Committed: info.Committed, Cause: string(info.Cause),
		DurationSeconds: info.Duration.Seconds(), Outputs: info.Outputs,
		ChangelogRecords: info.ChangelogRecords, Partitions: info.Offsets,
	}
	if info.Err != nil {
		c.Error = info.Err.Error()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if info.Committed {
		t.mu.committed++
	} else {
		t.mu.aborted[info.Cause]++
	}
	t.mu.last = c
}

// snapshot returns the counts and the last cycle.
func (t *TxnTracker) snapshot() *Transactions {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := &Transactions{Committed: t.mu.committed, Aborted: map[string]int64{}}
	for _, c := range chain.TxnAbortCauses {
		out.Aborted[string(c)] = t.mu.aborted[c]
	}
	for c, n := range t.mu.aborted { // a cause this build does not list
		out.Aborted[string(c)] = n
	}
	if t.mu.last != nil {
		last := *t.mu.last
		out.Last = &last
	}
	return out
}
