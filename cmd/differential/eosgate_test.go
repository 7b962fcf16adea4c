package main

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testutil"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// keyScopeCounter counts the records followers began through a key-scoped
// gate (chain.BeginInfo.KeyScope).
type keyScopeCounter struct{ n atomic.Int64 }

func (c *keyScopeCounter) Begin(b chain.BeginInfo) {
	if b.KeyScope {
		c.n.Add(1)
	}
}
func (c *keyScopeCounter) Advanced(string, int32, int, int64, time.Time) {}
func (c *keyScopeCounter) Committed(string, int32, int64, string)        {}

// TestRunExactlyOnceKeepsTheKeyGate: `run --guarantee exactly-once` runs
// the followers with the gate --gate names (key, the default) — it used
// to switch to the partition gate — and a read_committed reader sees every
// output and dead letter of the model exactly once, one user's in offset
// order.
func TestRunExactlyOnceKeepsTheKeyGate(t *testing.T) {
	tp := newTopics(t, 3)
	tp.produce(t, 3000, 11)
	var keyed keyScopeCounter
	tp.runToEndWith(t, []chain.Option{chain.WithObserver(&keyed)}, "--guarantee", "exactly-once", "--key-concurrency", "8")
	require.Positive(t, keyed.n.Load(), "the followers passed a key-scoped gate")
	inputs, _ := tp.input(t)
	// The last transaction's markers are written after EndTxn returns: its
	// records are read_committed once the topics have no open transaction.
	tp.b.WaitStable(t, tp.out)
	tp.b.WaitStable(t, tp.dlq)
	r := reference.Check(inputs, testRules(), reference.FromKafka(tp.b.ReadAll(t, tp.out, true)),
		reference.FromKafka(tp.b.ReadAll(t, tp.dlq, true)), reference.Options{Duplicates: reference.NoDuplicates, Order: reference.KeyOrder})
	require.True(t, r.OK(), r.Summary())
	require.Positive(t, r.Installs.Matched)
	require.Positive(t, r.Purchases.Matched)
	t.Logf("key-scoped begins %d; %d installs, %d purchases, %d dead letters (read_committed)",
		keyed.n.Load(), r.Installs.Matched, r.Purchases.Matched, r.DeadLetters.Matched)
}

// TestRunWithoutTransactionsNamesTheFix: a cluster that refuses the
// transactional id (an ACL; InitProducerId answered
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED on the embedded broker) fails `run`
// at start, under the default guarantee, with the fix and the
// at-least-once alternative.
func TestRunWithoutTransactionsNamesTheFix(t *testing.T) {
	tp := newTopics(t, 1)
	e := tp.b.Embedded()
	if e == nil {
		t.Skip("forces the broker's answer: embedded broker only")
	}
	testutil.Refuse(e.Fake(), kmsg.InitProducerID, -1, func(kr kmsg.Request) kmsg.Response {
		req := kr.(*kmsg.InitProducerIDRequest)
		if req.TransactionalID == nil {
			return nil // an idempotent producer's (the changelog's): allowed
		}
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp
	})
	code, _, errs := runCLI(t, hooks{}, tp.runArgs()...)
	require.Equal(t, exitFatal, code, errs)
	require.Contains(t, errs, "--guarantee exactly-once (the default) needs Kafka transactions")
	require.Contains(t, errs, "an ACL refuses the transactional id: allow Write and Describe on it")
	require.Contains(t, errs, "run without transactions with --guarantee at-least-once")
}
