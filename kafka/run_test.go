package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chainmetrics"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// TestGroupRebalancesWithoutDuplicates is the delivery test of the adapter:
// a three-stage chain over 8 partitions and 100,000 records, run by two
// group members with separate chains. The first member starts alone; the
// second joins (rebalance); the first is cancelled mid-run (rebalance: the
// second takes every partition) and started again (rebalance). Every stage
// must begin every (partition, offset) exactly once across the group — a
// clean rebalance repeats nothing (DESIGN I6) — process exactly the records
// of its type, and the group's committed offsets must end at every
// partition's end.
//
// The records are produced in phases tied to the scenario, so every member
// has work whatever the machine's speed: each phase is produced only after
// the member that must take part in it owns partitions.
func TestGroupRebalancesWithoutDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy sarama.BalanceStrategy
	}{
		{"sticky", nil}, // the default: eager sticky
		{"cooperative-sticky", sarama.NewBalanceStrategyCooperativeSticky()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.strategy != nil && testing.Short() {
				t.Skip("short: the default strategy only")
			}
			testGroupRebalances(t, tc.strategy)
		})
	}
}

func testGroupRebalances(t *testing.T, strategy sarama.BalanceStrategy) {
	const partitions, records = 8, 100_000
	b := testbroker.New(t)
	topic := b.Topic(t, partitions)
	group := testbroker.Name(t, "group")
	w := newWorkload(partitions, records, 1)

	// The last stage holds one record of partition 0 until the first
	// member has begun releasing partitions to the second: the rebalance
	// then finds that record in flight, the partition's stages at
	// different positions, and the partition must drain and commit before
	// it moves.
	const holdP = int32(0)
	holdAt := int64(-1)
	for o := int64(1000); holdAt < 0; o++ {
		if w.types[holdP][o] == "purchase" {
			holdAt = o
		}
	}
	holding, release := make(chan struct{}), make(chan struct{})
	l := newLedger(t, w.types, len(stageTypes))
	stages := l.stages(nil)
	last := stages[2].Processor
	var held atomic.Bool
	stages[2].Processor = chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
		if ev.Partition == holdP && ev.Offset == holdAt && held.CompareAndSwap(false, true) {
			close(holding)
			<-release
		}
		return last.Process(ctx, pc, ev)
	})
	cfg := groupConfig(b, topic, group, t)
	cfg.Strategy = strategy
	newChain := func(m *member) *chain.Chain {
		ch, err := chain.New(stages, decoder, chainOptions(t, l.observer(m))...)
		require.NoError(t, err)
		return ch
	}
	begin := time.Now()
	var produceTime time.Duration
	produce := func(from, to int) {
		start := time.Now()
		w.produce(t, b, topic, from, to)
		produceTime += time.Since(start)
	}

	// Phase 1: the first member alone, until it holds the record.
	produce(0, 40_000)
	a := runMember(t, cfg, newChain)
	recv(t, holding, "the first member to reach the held record")

	// Phase 2: the second member joins. Once the first has released a
	// partition (the rebalance is under way), the held record completes.
	bm := runMember(t, cfg, newChain)
	recv(t, a.released, "the first member to release a partition")
	close(release)
	recv(t, bm.active, "the second member to own partitions")
	produce(40_000, 65_000)
	recv(t, l.after(50_000), "the group to begin 50,000 records")
	waitBegun(t, l, bm)

	// Phase 3: the first member is cancelled mid-run; the second takes over.
	aBegun := a.begun.Load()
	err, took := a.stop(t)
	require.NoError(t, err, "a cancelled member's Run returns nil")
	t.Logf("first member stopped in %v after beginning %d records", took, aBegun)
	produce(65_000, 85_000)
	recv(t, l.after(70_000), "the group to begin 70,000 records")

	// Phase 4: the first member starts again.
	a2 := runMember(t, cfg, newChain)
	recv(t, a2.active, "the restarted member to own partitions")
	produce(85_000, records)
	l.waitDone(t, "the group to commit every partition's end")
	waitBegun(t, l, a2)
	t.Logf("%d records x %d stages in %v (producing: %v); stage-0 begins: first member %d, second %d, restarted %d",
		records, len(stageTypes), time.Since(begin), produceTime, aBegun, bm.begun.Load(), a2.begun.Load())

	for _, m := range []*member{bm, a2} {
		err, _ := m.stop(t)
		require.NoError(t, err)
	}
	l.checkExactlyOnce(w.types)
	for p, blk := range groupOffsets(t, b, group, topic, partitionsOf(w.types)) {
		require.Equal(t, l.ends[p], blk.Offset, "partition %d's committed offset is its end", p)
		cps, ok := commit.DecodeMetadata(blk.Metadata, blk.Offset, stageTypes)
		require.True(t, ok, "the commit metadata is the chain's")
		for _, cp := range cps {
			require.Equal(t, l.ends[p], cp.Next, "stage %s of partition %d", cp.Stage, p)
		}
	}
}

// waitBegun waits until member m has begun a record, one group-wide record
// at a time (no sleep).
func waitBegun(t *testing.T, l *ledger, m *member) {
	t.Helper()
	for m.begun.Load() == 0 {
		select {
		case <-l.done:
			t.Fatal("the member began no record before the group finished")
		default:
		}
		recv(t, l.after(l.total.Load()+1), "the member to begin a record")
	}
}

// TestSIGTERMCommitsWhatCompletedAndRestartRepeatsNothing stops a Run the
// way a SIGTERM does (its context ends) while records are in flight: every
// processed record emits an output through kafka.Producer, so records wait
// for acknowledgements, and one record of partition 0 is still being
// processed when the stop begins. Run must return nil within the shutdown
// timeout after finishing that record, the final commit must equal the
// smallest stage position the chain reported (with every stage's position
// in the metadata), and a restart must finish the rest without processing
// anything twice: the output topic holds every processed record's output
// exactly once.
func TestSIGTERMCommitsWhatCompletedAndRestartRepeatsNothing(t *testing.T) {
	const partitions, records = 4, 8000
	const shutdownTimeout = 10 * time.Second
	b := testbroker.New(t)
	topic := b.Topic(t, partitions)
	out := b.Topic(t, 2)
	group := testbroker.Name(t, "group")
	types := produceWorkload(t, b, topic, partitions, records, 2)

	prod, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: b.Addrs(), Sarama: b.Config(), Logger: testLogger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, prod.Close()) }()

	const holdP = int32(0)
	holdAt := int64(-1)
	for o := int64(200); holdAt < 0; o++ {
		if types[holdP][o] == "purchase" {
			holdAt = o
		}
	}
	holding, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool

	l := newLedger(t, types, len(stageTypes))
	emit := func(pc *chain.Context, ev *chain.Event) {
		pc.Emit(chain.Message{Key: ev.Key, Value: fmt.Appendf(nil, "%s/%d/%d", pc.Stage(), ev.Partition, ev.Offset)})
	}
	stages := l.stages(emit)
	last := stages[2].Processor
	stages[2].Processor = chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
		if ev.Partition == holdP && ev.Offset == holdAt && held.CompareAndSwap(false, true) {
			close(holding)
			<-release
		}
		return last.Process(ctx, pc, ev)
	})
	newChain := func(m *member) *chain.Chain {
		ch, err := chain.New(stages, decoder, chainOptions(t, l.observer(m),
			chain.WithProducer(prod), chain.WithOutputTopic(out), chain.WithShutdownTimeout(shutdownTimeout),
			// A window larger than a partition: the chain reports
			// Observer.Begin before the stage's tracker accepts the record,
			// so a stage waiting for a free slot when the stop comes
			// reports a begin it then abandons, and the restart reports
			// it again (a chain-core bug; processing is not repeated).
			chain.WithInFlight(records))...)
		require.NoError(t, err)
		return ch
	}
	cfg := groupConfig(b, topic, group, t)

	first := runMember(t, cfg, newChain)
	recv(t, holding, "the held record")
	recv(t, l.after(records/3), "a third of the records")
	start := time.Now()
	first.cancel() // SIGTERM
	recv(t, first.released, "a partition to stop")
	close(release) // the in-flight record finishes during the drain
	recv(t, first.done, "Run to return")
	took := time.Since(start)
	require.NoError(t, first.err)
	require.Less(t, took, shutdownTimeout, "Run returns within the shutdown timeout")
	// The stop came while partition 0's last stage was inside holdAt, so
	// that stage ends exactly past it: the record in flight finished and
	// counts, nothing after it was begun, and the partition is mid-run.
	require.Equal(t, holdAt+1, l.stagePositions(holdP)[2], "the record in flight at the stop completed and is committed")
	t.Logf("stopped in %v; stage 0 had begun %d of %d records", took, l.total.Load(), records)

	ps := partitionsOf(types)
	for p, blk := range groupOffsets(t, b, group, topic, ps) {
		pos := l.stagePositions(p)
		require.Equal(t, minOf(pos), blk.Offset, "partition %d: committed == min stage position (stages at %v)", p, pos)
		cps, ok := commit.DecodeMetadata(blk.Metadata, blk.Offset, stageTypes)
		require.True(t, ok)
		for i, cp := range cps {
			require.Equal(t, pos[i], cp.Next, "partition %d stage %s resumes where it stopped", p, cp.Stage)
		}
	}

	second := runMember(t, cfg, newChain)
	l.waitDone(t, "the restarted member to commit every partition's end")
	err, _ = second.stop(t)
	require.NoError(t, err)
	l.checkExactlyOnce(types)

	// Every processed record's output is in the output topic once.
	seen := map[string]int{}
	for _, msgs := range b.ReadAll(t, out, false) {
		for _, m := range msgs {
			seen[string(m.Value)]++
		}
	}
	want := 0
	for p, ts := range types {
		for o, typ := range ts {
			want++
			require.Equal(t, 1, seen[fmt.Sprintf("%s/%d/%d", typ, p, o)], "output of %s %d/%d", typ, p, o)
		}
	}
	require.Len(t, seen, want, "no other outputs")
}

// TestForeignCommitMetadataStartsEveryStageAtTheOffset: a group whose
// offsets were committed by another program (plain sarama, metadata that
// is not the chain's) must start every stage at the committed offset, not
// crash and not skip (ANCHORS: parallel-consumer #326).
func TestForeignCommitMetadataStartsEveryStageAtTheOffset(t *testing.T) {
	const partitions, records = 2, 600
	b := testbroker.New(t)
	topic := b.Topic(t, partitions)
	group := testbroker.Name(t, "group")
	types := produceWorkload(t, b, topic, partitions, records, 3)

	// Another program commits half of every partition, as a non-member
	// (generation -1), with metadata of its own. (sarama's OffsetManager
	// cannot be used on kfake here: its initial offset fetch of a group that
	// never committed gets GROUP_ID_NOT_FOUND from kfake, where Kafka
	// answers offset -1.)
	const foreign = "legacy-consumer v7; lag=3; {\"x\":1}"
	from := map[int32]int64{}
	client, err := sarama.NewClient(b.Addrs(), b.Config())
	require.NoError(t, err)
	coord, err := client.Coordinator(group)
	require.NoError(t, err)
	req := sarama.NewOffsetCommitRequest(client.Config(), group)
	for p, ts := range types {
		from[p] = int64(len(ts) / 2)
		req.AddBlock(topic, p, from[p], 0, foreign)
	}
	resp, err := coord.CommitOffset(req)
	require.NoError(t, err)
	for p := range types {
		require.Equal(t, sarama.ErrNoError, resp.Errors[topic][p])
	}
	require.NoError(t, client.Close())
	for p, blk := range groupOffsets(t, b, group, topic, partitionsOf(types)) {
		require.Equal(t, from[p], blk.Offset)
		require.Equal(t, foreign, blk.Metadata)
	}

	l := newLedger(t, types, len(stageTypes))
	m := runMember(t, groupConfig(b, topic, group, t), func(m *member) *chain.Chain {
		ch, err := chain.New(l.stages(nil), decoder, chainOptions(t, l.observer(m))...)
		require.NoError(t, err)
		return ch
	})
	l.waitDone(t, "every partition's end committed")
	err, _ = m.stop(t)
	require.NoError(t, err)

	for p, ts := range types {
		end := int64(len(ts))
		for s := range stageTypes {
			for o := range end {
				want := int32(0)
				if o >= from[p] {
					want = 1
				}
				require.Equal(t, want, l.begun[p][int64(s)*end+o].Load(), "stage %d, %d/%d (resumed at %d)", s, p, o, from[p])
			}
		}
	}
}

// TestFatalPartitionErrorStopsRunAfterFinalCommits: a processor's Fatal
// error on one partition stops the whole Run; every partition still makes
// its final commit of what completed, and Run returns the
// *chain.PartitionError.
func TestFatalPartitionErrorStopsRunAfterFinalCommits(t *testing.T) {
	const partitions, records = 4, 4000
	b := testbroker.New(t)
	topic := b.Topic(t, partitions)
	group := testbroker.Name(t, "group")
	types := produceWorkload(t, b, topic, partitions, records, 4)

	// The failing record: partition 1's first install at or after offset 300.
	const failP = int32(1)
	failAt := int64(-1)
	for o := int64(300); o < int64(len(types[failP])); o++ {
		if types[failP][o] == "install" {
			failAt = o
			break
		}
	}
	require.NotEqual(t, int64(-1), failAt)

	l := newLedger(t, types, len(stageTypes))
	boom := errors.New("boom")
	stages := l.stages(nil)
	inner := stages[1].Processor
	stages[1].Processor = chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
		if ev.Partition == failP && ev.Offset == failAt {
			return chain.Fatal(boom)
		}
		return inner.Process(ctx, pc, ev)
	})
	m := runMember(t, groupConfig(b, topic, group, t), func(m *member) *chain.Chain {
		ch, err := chain.New(stages, decoder, chainOptions(t, l.observer(m))...)
		require.NoError(t, err)
		return ch
	})
	recv(t, m.done, "Run to stop on the fatal error")
	var perr *chain.PartitionError
	require.ErrorAs(t, m.err, &perr)
	require.Equal(t, failP, perr.Partition)
	require.ErrorIs(t, m.err, boom)

	for p, blk := range groupOffsets(t, b, group, topic, partitionsOf(types)) {
		pos := l.stagePositions(p)
		if minOf(pos) == 0 && blk.Offset == -1 {
			// The fatal error came before this partition completed
			// anything (or before it was claimed): there is nothing to
			// commit, and nothing was committed.
			continue
		}
		require.Equal(t, minOf(pos), blk.Offset, "partition %d made its final commit (stages at %v)", p, pos)
		if p == failP {
			require.LessOrEqual(t, blk.Offset, failAt, "the failed record is not committed")
		}
	}
}

// TestMissingTopicFailsFast: Run names the topic and the brokers instead
// of waiting for a topic that does not exist.
func TestMissingTopicFailsFast(t *testing.T) {
	b := testbroker.New(t)
	topic := testbroker.Name(t, "missing")
	ch, err := chain.New([]chain.Stage{{Name: "s", Processor: chain.ProcessorFunc(
		func(context.Context, *chain.Context, *chain.Event) error { return nil })}}, decoder)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	start := time.Now()
	err = kafka.Run(ctx, ch, groupConfig(b, topic, testbroker.Name(t, "group"), t))
	took := time.Since(start)
	require.ErrorIs(t, err, kafka.ErrUnknownTopic)
	require.Contains(t, err.Error(), topic)
	require.Contains(t, err.Error(), b.Addrs()[0])
	require.Less(t, took, 10*time.Second)
	t.Logf("failed in %v: %v", took, err)
}

func TestConfigValidate(t *testing.T) {
	good := kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "in", Group: "g"}
	require.NoError(t, good.Validate())
	for _, tc := range []struct {
		mutate func(c *kafka.Config)
		want   string
	}{
		{func(c *kafka.Config) { c.Brokers = nil }, "Config.Brokers is empty"},
		{func(c *kafka.Config) { c.Brokers = []string{"localhost"} }, `"localhost" is not host:port`},
		{func(c *kafka.Config) { c.Topic = "" }, "Config.Topic is required"},
		{func(c *kafka.Config) { c.Topic = "a topic" }, "not a legal topic name"},
		{func(c *kafka.Config) { c.Group = "" }, "Config.Group is required"},
		{func(c *kafka.Config) { c.Start = "oldest" }, `Config.Start must be "earliest" or "latest"`},
		{func(c *kafka.Config) { c.SessionTimeout = -time.Second }, "Config.SessionTimeout"},
		{func(c *kafka.Config) { c.FetchBatch = -1 }, "Config.FetchBatch"},
		{func(c *kafka.Config) { c.MetadataRefresh = -time.Second }, "Config.MetadataRefresh must be >= 0"},
		{func(c *kafka.Config) { c.SessionTimeout, c.HeartbeatInterval = time.Second, 2*time.Second },
			"Heartbeat.Interval must be < Consumer.Group.Session.Timeout"},
		{func(c *kafka.Config) { c.Sarama = sarama.NewConfig(); c.Sarama.Version = sarama.V0_10_0_0 }, "consumer groups need >= 0.10.2"},
		{func(c *kafka.Config) { c.InstanceID = "pod/0" }, `Config.InstanceID: "pod/0" is not a legal group instance id`},
		{func(c *kafka.Config) { c.LeaveOnStop = true }, "Config.LeaveOnStop is for a static member"},
		{func(c *kafka.Config) {
			c.InstanceID, c.LeaveOnStop, c.Sarama = "pod-0", true, sarama.NewConfig()
			c.Sarama.Version = sarama.V2_3_0_0
		}, "Config.LeaveOnStop needs Config.Sarama.Version >= 2.4"},
		{func(c *kafka.Config) {
			c.InstanceID, c.Sarama = "pod-0", sarama.NewConfig()
			c.Sarama.Version = sarama.V2_2_0_0
		},
			"Consumer.Group.InstanceId need Version >= 2.3"},
		{func(c *kafka.Config) { c.Sarama = sarama.NewConfig(); c.Sarama.Net.MaxOpenRequests = 0 }, "sarama configuration of the"},
	} {
		c := good
		tc.mutate(&c)
		err := c.Validate()
		require.Error(t, err, tc.want)
		require.Contains(t, err.Error(), tc.want)
		require.True(t, strings.HasPrefix(err.Error(), "kafka: "), err.Error())
	}
}

// TestInstanceIDReachesTheGroupAndItsCommits: a static member joins with
// its instance id and its offset commits (the commit client's, which the
// Transactor's offsets read too) carry it, as the coordinator checks a
// static member's commits against it; a base configuration's instance id
// is the default.
func TestInstanceIDReachesTheGroupAndItsCommits(t *testing.T) {
	c := kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "in", Group: "g", InstanceID: "pod-0"}
	group, commit, poll, err := kafka.InstanceIDs(&c)
	require.NoError(t, err)
	require.Equal(t, []string{"pod-0", "pod-0", ""}, []string{group, commit, poll})

	c = kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "in", Group: "g", Sarama: sarama.NewConfig()}
	c.Sarama.Consumer.Group.InstanceId = "from-base"
	group, commit, _, err = kafka.InstanceIDs(&c)
	require.NoError(t, err)
	require.Equal(t, []string{"from-base", "from-base"}, []string{group, commit})
	require.NoError(t, (&kafka.Config{Brokers: c.Brokers, Topic: "in", Group: "g", Sarama: c.Sarama, LeaveOnStop: true}).Validate(),
		"the base's instance id makes a static member, which may leave on stop")

	c = kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "in", Group: "g"}
	group, commit, _, err = kafka.InstanceIDs(&c)
	require.NoError(t, err)
	require.Equal(t, []string{"", ""}, []string{group, commit}, "a dynamic member by default")
}

// TestFollowerPollsKafkaWhenBehindTheBuffer: a follower held while its
// leader runs more than the handoff buffer ahead must read the partition
// from Kafka itself (the polling client, its own fetch requests per reader, two
// followers of one partition at once) and switch back, without skipping or
// repeating an offset (DESIGN I2). The run also reports into one registry:
// sarama's client metrics and the chain's gauges side by side.
func TestFollowerPollsKafkaWhenBehindTheBuffer(t *testing.T) {
	const partitions, records = 2, 3000
	b := testbroker.New(t)
	topic := b.Topic(t, partitions)
	group := testbroker.Name(t, "group")
	types := produceWorkload(t, b, topic, partitions, records, 5)

	const holdP = int32(0)
	holdAt := int64(-1)
	for o := int64(100); holdAt < 0; o++ {
		if types[holdP][o] == "install" {
			holdAt = o
		}
	}
	holding, release := make(chan struct{}), make(chan struct{})
	l := newLedger(t, types, len(stageTypes))
	stages := l.stages(nil)
	inner := stages[1].Processor
	stages[1].Processor = chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
		if ev.Partition == holdP && ev.Offset == holdAt {
			close(holding)
			<-release
		}
		return inner.Process(ctx, pc, ev)
	})
	reg := metrics.NewRegistry()
	var ch *chain.Chain
	cfg := groupConfig(b, topic, group, t)
	cfg.Registry = reg
	m := runMember(t, cfg, func(m *member) *chain.Chain {
		var err error
		ch, err = chain.New(stages, decoder, chainOptions(t, l.observer(m),
			chain.WithBufferSize(64), chain.WithBatchSize(16), chainmetrics.Option(reg))...)
		require.NoError(t, err)
		return ch
	})
	recv(t, holding, "the held record")
	recv(t, l.after(l.total64()), "the leader to begin every record")
	close(release)
	l.waitDone(t, "every partition's end committed")

	for _, ps := range ch.Stats() {
		if ps.Partition != holdP {
			continue
		}
		for _, s := range ps.Stages[1:] {
			require.GreaterOrEqual(t, s.Switches, int64(1), "stage %s fell out of the buffer and polled", s.Name)
		}
	}
	require.NotNil(t, reg.Get("incoming-byte-rate"), "sarama reports into the registry")
	require.NotNil(t, reg.Get(fmt.Sprintf("differential.stage.%s.%d.install.mode_switches", topic, holdP)), "so does the chain")

	err, _ := m.stop(t)
	require.NoError(t, err)
	l.checkExactlyOnce(types)
}

func TestRebalanceTimeoutMustExceedShutdownTimeout(t *testing.T) {
	b := testbroker.New(t)
	ch, err := chain.New([]chain.Stage{{Name: "s", Processor: chain.ProcessorFunc(
		func(context.Context, *chain.Context, *chain.Event) error { return nil })}}, decoder,
		chain.WithShutdownTimeout(2*time.Minute))
	require.NoError(t, err)
	cfg := groupConfig(b, b.Topic(t, 1), testbroker.Name(t, "group"), t)
	cfg.RebalanceTimeout = time.Minute
	err = kafka.Run(context.Background(), ch, cfg)
	require.ErrorContains(t, err, "RebalanceTimeout 1m0s must exceed the chain's shutdown timeout 2m0s")
}

// A stop whose final changelog append fails (brokers down at SIGTERM) is a
// clean stop of Run, as in exactly-once mode: the partition reports
// chain.ErrFinalCommit, Run returns nil (the CLI exits 0), and the restart
// resumes from the previous commit. Here the changelog is the in-memory one
// with its next append failing; the final checkpoint is the only one.
func TestFailedFinalChangelogAppendIsACleanStop(t *testing.T) {
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	group := testbroker.Name(t, "group")
	produceWorkload(t, b, topic, 1, 50, 1)

	var processed atomic.Int64
	all := make(chan struct{})
	keep := chain.ProcessorFunc(func(_ context.Context, pc *chain.Context, e *chain.Event) error {
		if processed.Add(1) == 50 {
			close(all)
		}
		return pc.State().Set(e.Key, e.Value, time.Time{})
	})
	cl := chaintest.NewChangelog()
	ch, err := chain.New([]chain.Stage{{Name: "keep", Processor: keep}}, decoder,
		chain.WithStore(store.NewMemory()), chain.WithChangelog(cl), chain.WithLogger(testLogger(t)),
		chain.WithCommitInterval(time.Hour), chain.WithShutdownTimeout(5*time.Second))
	require.NoError(t, err)
	released := make(chan error, 1)
	cfg := groupConfig(b, topic, group, t)
	cfg.Hooks.Released = func(_ string, _ int32, err error) { released <- err }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kafka.Run(ctx, ch, cfg) }()
	recv(t, all, "every record processed")
	cl.FailAppends(1)
	cancel()
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
	require.NoError(t, runErr, "a failed final checkpoint is a clean stop")
	err = <-released
	require.ErrorIs(t, err, chain.ErrFinalCommit)
	require.ErrorContains(t, err, "injected changelog append failure")
	require.False(t, errors.Is(err, chain.ErrShutdownTimeout))
	require.Empty(t, groupOffsets(t, b, group, topic, []int32{0})[0].Metadata, "nothing was committed")
}

// countingHandler counts the records logged with one message.
type countingHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int32
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.msg, h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.msg, h.n}
}

// TestExactlyOnceStartWaitsOutACrashedOwnersTransaction: a previous owner
// of the group's partition crashed with a transaction open that holds
// offsets for it, so the group coordinator answers a RequireStable offset
// fetch with UNSTABLE_OFFSET_COMMIT until the transaction coordinator
// aborts it at its timeout. An exactly-once member started meanwhile must
// wait that out — not join the group again in a loop (every join a
// rebalance of the whole group), nor end Run — and then process the partition from the stable offsets: every record
// once. Runs on kfake and on a real broker.
func TestExactlyOnceStartWaitsOutACrashedOwnersTransaction(t *testing.T) {
	const txnTimeout = 3 * time.Second
	b := testbroker.New(t)
	topic := b.Topic(t, 1)
	group := testbroker.Name(t, "group")
	types := produceWorkload(t, b, topic, 1, 40, 5)

	// The crashed owner: a transaction holding offsets of the group
	// (TxnOffsetCommit sent, EndTxn never), left for the transaction
	// coordinator to abort at its timeout.
	openCrashedTransaction(t, b, testbroker.Name(t, "crashed"), txnTimeout, group, topic, 0, 20)
	opened := time.Now()

	tx, err := kafka.NewTransactor(kafka.TransactorConfig{Brokers: b.Addrs(), TransactionalID: testbroker.Name(t, "txn"),
		Timeout: 5 * time.Second, Sarama: b.Config(), Logger: testLogger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Close()) }()
	l := newLedger(t, types, len(stageTypes))
	var rejoins atomic.Int32
	cfg := groupConfig(b, topic, group, t)
	cfg.Logger = slog.New(countingHandler{testLogger(t).Handler(), "consumer group session failed; joining again", &rejoins})
	m := runMember(t, cfg, func(m *member) *chain.Chain {
		ch, err := chain.New(l.stages(nil), decoder, chainOptions(t, l.observer(m), chain.WithExactlyOnce(tx))...)
		require.NoError(t, err)
		return ch
	})
	select {
	case <-l.done:
	case <-m.done:
		t.Fatalf("Run ended while the crashed owner's transaction was open: %v", m.err)
	case <-time.After(waitTimeout):
		t.Fatal("the partition was not processed to its end")
	}
	waited := time.Since(opened)
	err, _ = m.stop(t)
	require.NoError(t, err)
	l.checkExactlyOnce(types)
	// sarama's own initial offset fetch gives up after a few quick
	// retries and fails the first session; Run then waits until the
	// offsets are stable and joins once more.
	require.LessOrEqual(t, rejoins.Load(), int32(1), "the member waited for the transaction to end instead of joining again in a loop")
	t.Logf("processed to the end %v after the crashed owner's transaction opened (transaction timeout %v), %d failed session(s)", waited.Round(time.Millisecond), txnTimeout, rejoins.Load())
}

// openCrashedTransaction leaves open, as a crashed transactional producer
// does, a transaction that holds offset for group's topic/partition: the
// group coordinator keeps the offset pending (a RequireStable fetch gets
// UNSTABLE_OFFSET_COMMIT) until the transaction coordinator aborts the
// transaction at timeout. Raw requests: sarama's producer sends
// TxnOffsetCommit only when it commits.
func openCrashedTransaction(t *testing.T, b *testbroker.Broker, txnID string, timeout time.Duration, group, topic string, partition int32, offset int64) {
	t.Helper()
	cfg := b.Config()
	cfg.Version = sarama.V2_5_0_0
	client, err := sarama.NewClient(b.Addrs(), cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, client.Close()) }()
	tcoord, err := client.TransactionCoordinator(txnID)
	require.NoError(t, err)
	ipr, err := tcoord.InitProducerID(&sarama.InitProducerIDRequest{Version: 3, TransactionalID: &txnID, TransactionTimeout: timeout, ProducerID: -1, ProducerEpoch: -1})
	require.NoError(t, err)
	require.Equal(t, sarama.ErrNoError, ipr.Err)
	aor, err := tcoord.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 1, TransactionalID: txnID, ProducerID: ipr.ProducerID, ProducerEpoch: ipr.ProducerEpoch, GroupID: group})
	require.NoError(t, err)
	require.Equal(t, sarama.ErrNoError, aor.Err)
	gcoord, err := client.Coordinator(group)
	require.NoError(t, err)
	md := "crashed"
	tor, err := gcoord.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{Version: 2, TransactionalID: txnID, GroupID: group,
		ProducerID: ipr.ProducerID, ProducerEpoch: ipr.ProducerEpoch,
		Topics: map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: partition, Offset: offset, LeaderEpoch: -1, Metadata: &md}}}})
	require.NoError(t, err)
	for _, pe := range tor.Topics[topic] {
		require.Equal(t, sarama.ErrNoError, pe.Err)
	}
}
