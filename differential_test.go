package differential_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential"
	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
)

func TestRunRefusesAnIncompleteConfig(t *testing.T) {
	err := differential.Run(context.Background(), differential.Config{Topic: "events"}, nil)
	require.EqualError(t, err, "differential: Run needs Brokers, Group, a decoder (TypePrefix, or a chain.Decoder), a stage (On)")
}

func TestTypePrefix(t *testing.T) {
	d := differential.TypePrefix(":")
	at := time.Unix(1_800_000_000, 0)
	got, err := d.Decode(&chain.Record{Value: []byte("order:book"), Timestamp: at})
	require.NoError(t, err)
	require.Equal(t, chain.Decoded{Type: "order", Time: at}, got)
	for _, v := range []string{"order", ":book", ""} {
		_, err := d.Decode(&chain.Record{Value: []byte(v)})
		require.Error(t, err, "%q has no type", v)
	}
}

// TestRunExactlyOnceStateFollowsThePartition: Run with ExactlyOnce and
// Changelog. A first member processes orders and payments; a second one,
// with an empty state directory (another machine), takes over the group and
// processes payments for the same orders: it finds every order through the
// changelog, and a read_committed reader sees every payment's output once.
func TestRunExactlyOnceStateFollowsThePartition(t *testing.T) {
	b := testbroker.New(t)
	in, out := b.Topic(t, 2), b.Topic(t, 2)
	group := testbroker.Name(t, "group")
	const orders = 20
	var msgs []*sarama.ProducerMessage
	for i := range orders {
		msgs = append(msgs, msg(i, "order:item-%d", i))
	}
	for i := range orders / 2 {
		msgs = append(msgs, msg(i, "payment:%d", i))
	}
	b.Produce(t, in, msgs...)
	orderStage := func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		return pc.State().Set(e.Key, e.Value, time.Time{})
	}
	paymentStage := func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		order, found, err := pc.State().Get(e.Key)
		if err != nil {
			return err
		}
		pc.Emit(chain.Message{Key: e.Key, Value: fmt.Appendf(nil, "%s %s found=%v", e.Value, order, found)})
		return nil
	}
	run := func(stateDir string, ends map[int32]int64) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := &untilEnds{ends: ends, stop: cancel, done: make(chan struct{})}
		errc := make(chan error, 1)
		go func() {
			errc <- differential.Run(ctx, differential.Config{
				Brokers: b.Addrs(), Topic: in, Group: group, Output: out,
				StateDir: stateDir, ExactlyOnce: true, // and so a changelog
				Kafka:   kafka.Config{Sarama: b.Config(), MaxWaitTime: 50 * time.Millisecond},
				Options: []chain.Option{chain.WithCommitInterval(20 * time.Millisecond), chain.WithObserver(u)},
			}, differential.TypePrefix(":"), differential.On("order", orderStage), differential.On("payment", paymentStage))
		}()
		select {
		case <-u.done:
		case err := <-errc:
			t.Fatalf("Run returned before committing every partition's end: %v", err)
		case <-time.After(2 * time.Minute):
			t.Fatal("timed out waiting for every partition's end to be committed")
		}
		require.NoError(t, <-errc)
	}
	run(t.TempDir(), endsOf(msgs))

	var more []*sarama.ProducerMessage
	for i := orders / 2; i < orders; i++ {
		more = append(more, msg(i, "payment:%d", i))
	}
	b.Produce(t, in, more...)
	run(t.TempDir(), endsOf(append(msgs, more...)))

	b.WaitStable(t, out)
	var got []string
	for _, recs := range b.ReadAll(t, out, true) {
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
	}
	require.Len(t, got, orders, "one output per payment: %v", got)
	for _, v := range got {
		require.True(t, strings.HasSuffix(v, "found=true"), "the payment found its order: %s", v)
	}
}

// untilEnds ends a run once every partition's commit reached its end.
type untilEnds struct {
	mu   sync.Mutex
	ends map[int32]int64
	stop context.CancelFunc
	done chan struct{}
}

func (u *untilEnds) Begin(chain.BeginInfo)                         {}
func (u *untilEnds) Advanced(string, int32, int, int64, time.Time) {}
func (u *untilEnds) Committed(_ string, p int32, off int64, _ string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if off >= u.ends[p] {
		delete(u.ends, p)
	}
	if len(u.ends) == 0 && u.stop != nil {
		u.stop()
		u.stop = nil
		close(u.done)
	}
}

func msg(i int, format string, args ...any) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)), Value: sarama.StringEncoder(fmt.Sprintf(format, args...))}
}

// endsOf is each partition's end after msgs were produced.
func endsOf(msgs []*sarama.ProducerMessage) map[int32]int64 {
	ends := map[int32]int64{}
	for _, m := range msgs {
		ends[m.Partition] = max(ends[m.Partition], m.Offset+1)
	}
	return ends
}
