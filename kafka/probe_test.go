package kafka_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
)

// tailObserver closes reached once every stage's position is at least end.
type tailObserver struct {
	end     int64
	mu      sync.Mutex
	pos     map[int]int64
	reached chan struct{}
	once    sync.Once
}

func (o *tailObserver) Begin(chain.BeginInfo)                  {}
func (o *tailObserver) Committed(string, int32, int64, string) {}
func (o *tailObserver) Advanced(_ string, _ int32, stage int, next int64, _ time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pos[stage] = max(o.pos[stage], next)
	if len(o.pos) == 2 && o.pos[0] >= o.end && o.pos[1] >= o.end {
		o.once.Do(func() { close(o.reached) })
	}
}

// TestTransactionalTailBecomesIdle: a transactional input's log ends with
// offsets the claim never delivers — the commit marker of the transaction
// holding the last records, and under read_committed an aborted
// transaction's records and its marker — so its high watermark stays above
// the last record for ever. The install stage's last record can only be
// released by its leader's idleness (the lateness is an hour); the idle
// release's end check (a fetch past the last record) must find nothing to
// deliver and let it through, and Stats must then show no lag: the tail is
// markers and aborted records, not records the consumer has yet to read.
// Before the end check the lag stayed at 1 (read_uncommitted) or 4
// (read_committed) for ever, which the health check reports as a stall.
func TestTransactionalTailBecomesIdle(t *testing.T) {
	for _, readCommitted := range []bool{false, true} {
		name := "read_uncommitted"
		if readCommitted {
			name = "read_committed"
		}
		t.Run(name, func(t *testing.T) {
			b := testbroker.New(t)
			topic := b.Topic(t, 1)
			pcfg := b.Config()
			pcfg.Producer.Idempotent = true
			pcfg.Producer.Transaction.ID = testbroker.Name(t, "txn")
			pcfg.Net.MaxOpenRequests = 1
			pcfg.Producer.Partitioner = sarama.NewManualPartitioner
			txn, err := sarama.NewSyncProducer(b.Addrs(), pcfg)
			require.NoError(t, err)
			defer func() { _ = txn.Close() }()
			send := func(vals ...string) {
				for _, v := range vals {
					_, _, err := txn.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0,
						Key: sarama.StringEncoder("u"), Value: sarama.StringEncoder(v)})
					require.NoError(t, err)
				}
			}
			require.NoError(t, txn.BeginTxn())
			send("click|1", "install|10") // 0, 1
			require.NoError(t, txn.CommitTxn())
			end, hwm := int64(2), int64(3) // the commit marker at 2
			if readCommitted {
				require.NoError(t, txn.BeginTxn())
				send("install|50", "click|40") // 3, 4
				require.NoError(t, txn.AbortTxn())
				hwm = 6 // the abort marker at 5
			}

			var mu sync.Mutex
			var installs []int64
			stages := []chain.Stage{
				{Name: "click", Filter: func(e *chain.Event) bool { return e.Type == "click" },
					Processor: chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })},
				{Name: "install", Filter: func(e *chain.Event) bool { return e.Type == "install" },
					Processor: chain.ProcessorFunc(func(_ context.Context, _ *chain.Context, e *chain.Event) error {
						mu.Lock()
						installs = append(installs, e.Offset)
						mu.Unlock()
						return nil
					})},
			}
			obs := &tailObserver{end: end, pos: map[int]int64{}, reached: make(chan struct{})}
			cfg := groupConfig(b, topic, testbroker.Name(t, "group"), t)
			if readCommitted {
				cfg.Sarama.Consumer.IsolationLevel = sarama.ReadCommitted
			}
			var ch *chain.Chain
			m := runMember(t, cfg, func(*member) *chain.Chain {
				ch, err = chain.New(stages, decoder, chainOptions(t, obs, chain.WithLateness(time.Hour))...)
				require.NoError(t, err)
				return ch
			})
			recv(t, obs.reached, "both stages at the end of the log's records (the install released by idleness)")

			ps := ch.Stats()
			require.Len(t, ps, 1)
			require.Len(t, ps[0].Stages, 2)
			require.Equal(t, hwm, ps[0].HighWatermark, "the end check's answer counts as the leader's high watermark")
			require.Positive(t, ps[0].Stages[1].IdleReleases, "only idleness can release the last install")
			for _, s := range ps[0].Stages {
				require.Equal(t, end, s.Position, s.Name)
				require.Zero(t, s.Lag, "stage %s: a tail of markers and aborted records is no lag (high watermark %d)", s.Name, ps[0].HighWatermark)
			}
			mu.Lock()
			require.Equal(t, []int64{1}, slices.Clone(installs), "the committed install, once; never the aborted one")
			mu.Unlock()
			err, _ = m.stop(t)
			require.NoError(t, err)
		})
	}
}
