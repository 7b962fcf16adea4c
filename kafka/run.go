package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
)

// ErrUnknownTopic is returned by Run when the input topic does not exist.
var ErrUnknownTopic = errors.New("kafka: topic does not exist")

// Run consumes cfg.Topic as a member of cfg.Group and runs ch over every
// partition the group assigns to it, until ctx ends (then it returns nil once
// every partition has drained and made its final commit) or a partition
// fails (then it stops every partition the same way and returns that
// partition's *chain.PartitionError). Errors that no retry can fix — a
// missing topic, a refused configuration, an authorization failure — are
// returned at once.
//
// Several Runs (in one process or many) with the same Group share the
// topic's partitions; each needs its own *chain.Chain.
func Run(ctx context.Context, ch *chain.Chain, cfg Config) error {
	if ch == nil {
		return errors.New("kafka: Run needs a chain")
	}
	cc, err := cfg.clientConfigs()
	if err != nil {
		return err
	}
	if ch.ExactlyOnce() {
		cc.exactlyOnce()
	}
	if rt, st := cc.group.Consumer.Group.Rebalance.Timeout, ch.ShutdownTimeout(); rt <= st {
		// A revoked partition drains (up to the shutdown timeout) and
		// commits before its member rejoins; a shorter rebalance timeout
		// would expel the member mid-drain and duplicate its work.
		return fmt.Errorf("kafka: RebalanceTimeout %v must exceed the chain's shutdown timeout %v (chain.WithShutdownTimeout)", rt, st)
	}
	log := cfg.logger().With("group", cfg.Group, "topic", cfg.Topic)
	warnInsecure(log, cc.group)
	r := &runner{ch: ch, cfg: &cfg, log: log}
	var sb *standbys
	if cfg.StandbyReplicas > 0 {
		if !ch.FollowsChangelog() {
			return errors.New("kafka: Config.StandbyReplicas needs a chain whose state follows a changelog (chain.WithChangelog and a store)")
		}
		sb = newStandbys(r)
		gs := cc.group.Consumer.Group.Rebalance.GroupStrategies
		gs[0] = PreferWarm(gs[0], cfg.Topic, sb.warmSet)
	}

	// The commit client comes first: it also checks that the topic exists.
	commitClient, err := sarama.NewClient(cfg.Brokers, cc.commit)
	if err != nil {
		return fmt.Errorf("kafka: connect to brokers %v: %w", cfg.Brokers, ExplainConnect(err, cfg.Security))
	}
	// The leader probes (on the commit client) end with their claims; one
	// may still wait for a paused broker's response until the client
	// closes, so they are waited for after it closed (defers run last
	// first).
	defer r.probes.Wait()
	defer closeLogged(log, "commit client", commitClient)
	if err := checkTopic(commitClient, cfg.Topic, cfg.Brokers); err != nil {
		return err
	}
	r.offsets = newOffsets(commitClient, cfg.Group)
	r.probeClient = commitClient

	pc, err := sarama.NewClient(cfg.Brokers, cc.poll)
	if err != nil {
		return fmt.Errorf("kafka: connect to brokers %v: %w", cfg.Brokers, ExplainConnect(err, cfg.Security))
	}
	defer closeLogged(log, "polling client", pc)
	r.poll = &pollClient{client: pc, log: log}

	groupClient, err := sarama.NewClient(cfg.Brokers, cc.group)
	if err != nil {
		return fmt.Errorf("kafka: connect to brokers %v: %w", cfg.Brokers, ExplainConnect(err, cfg.Security))
	}
	group, err := sarama.NewConsumerGroupFromClient(cfg.Group, groupClient)
	if err != nil {
		_ = groupClient.Close()
		return fmt.Errorf("kafka: consumer group %q: %w", cfg.Group, err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	r.cancel = cancel
	var logged sync.WaitGroup
	logged.Go(func() {
		for err := range group.Errors() {
			log.Warn("consumer group error", "err", err)
		}
	})
	// Consume has returned when this runs, so every claim has returned
	// (drained, final commit). Then the member leaves the group, which
	// closes Errors; the polling and commit clients, which the claims used,
	// close after (deferred earlier). A static member's Close leaves
	// nothing (KIP-345: the group keeps it for a restart within the session
	// timeout); with LeaveOnStop it then leaves by its instance id, on the
	// commit client, which is still open.
	defer func() {
		cancel(nil)
		closeLogged(log, "consumer group", group)
		logged.Wait()
		closeLogged(log, "group client", groupClient)
		if id := cc.group.Consumer.Group.InstanceId; id != "" && cfg.LeaveOnStop {
			r.leaveStatic(id)
		}
	}()

	if sb != nil {
		// Runs first among the defers: the standbys close before the
		// clients and the store they use.
		var standing sync.WaitGroup
		standing.Go(func() { sb.run(runCtx) })
		defer func() {
			cancel(nil)
			standing.Wait()
		}()
	}

	err = r.consume(runCtx, group)
	if fatal := r.fatal(); fatal != nil {
		return fatal
	}
	return err
}

// consume calls group.Consume until ctx ends: every call is one session (one
// generation with an eager strategy; a cooperative one keeps it across
// rebalances).
func (r *runner) consume(ctx context.Context, group sarama.ConsumerGroup) error {
	h := &handler{r: r}
	topics := []string{r.cfg.Topic}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := group.Consume(ctx, topics, h)
		switch {
		case err == nil || ctx.Err() != nil:
			backoff = 0
			continue
		case errors.Is(err, sarama.ErrClosedConsumerGroup):
			return nil
		case errors.Is(err, sarama.ErrUnstableOffsetCommit):
			// sarama's initial offset fetch (RequireStable, a few quick
			// retries) failed the session: a previous owner's transaction
			// holds offsets of the group until it ends (at the latest at
			// its timeout). Joining again at once would fail the same way,
			// a rebalance of every member each time: wait until the
			// offsets are stable first.
			r.waitStable(ctx)
			backoff = 0
			continue
		case !transient(err):
			if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				return fmt.Errorf("%w: %q on brokers %v: %w", ErrUnknownTopic, r.cfg.Topic, r.cfg.Brokers, err)
			}
			return fmt.Errorf("kafka: group %q on topic %q: %w", r.cfg.Group, r.cfg.Topic, err)
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		r.log.Warn("consumer group session failed; joining again", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// waitStable waits until the group's committed offsets of the topic are
// stable (no transaction holds offsets of them), ctx ends, or the fetch
// fails for another reason (logged: the next session tells).
func (r *runner) waitStable(ctx context.Context) {
	parts, err := r.offsets.client.Partitions(r.cfg.Topic)
	if err == nil {
		r.log.Info("an open transaction holds committed offsets of the group; waiting until it ends before joining again")
		start := time.Now()
		if _, err = r.offsets.fetchStable(ctx, r.cfg.Topic, parts); err == nil {
			r.log.Info("the group's offsets are stable; joining again", "waited", time.Since(start))
			return
		}
	}
	if ctx.Err() == nil {
		r.log.Warn("waiting for the group's offsets to be stable", "err", err)
	}
}

// checkTopic fails clearly, and after sarama's bounded metadata retries
// only, when the topic does not exist: a misspelled topic must not look like
// an idle consumer.
func checkTopic(client sarama.Client, topic string, brokers []string) error {
	parts, err := client.Partitions(topic)
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return fmt.Errorf("%w: %q on brokers %v (Run does not create topics)", ErrUnknownTopic, topic, brokers)
	case err != nil:
		return fmt.Errorf("kafka: metadata of topic %q on brokers %v: %w", topic, brokers, err)
	case len(parts) == 0:
		return fmt.Errorf("%w: %q on brokers %v has no partitions", ErrUnknownTopic, topic, brokers)
	}
	return nil
}

// runner is one Run's shared state.
type runner struct {
	ch      *chain.Chain
	cfg     *Config
	log     *slog.Logger
	offsets *offsets
	poll    *pollClient
	cancel  context.CancelCauseFunc

	probeClient sarama.Client  // leader probes (the commit client)
	probes      sync.WaitGroup // running leader probes

	mu       sync.Mutex
	err      error  // the first fatal partition error
	memberID string // of the latest session, for a static member's leave
}

// leaveTimeout bounds a static member's LeaveGroup at the end of Run: past
// it the member stays until its session times out, as it would without
// LeaveOnStop.
const leaveTimeout = 5 * time.Second

// leaveStatic removes the static member id from the group (LeaveGroup v3+
// by instance id, as Kafka's admin client removes a static member), so that
// its partitions move now instead of after the session timeout. It names the
// member id of the latest session: if a newer process with the same instance
// id has joined since, the coordinator refuses (FENCED_INSTANCE_ID) instead
// of removing that one. Failures are logged: the session timeout remains.
func (r *runner) leaveStatic(instance string) {
	r.mu.Lock()
	member := r.memberID
	r.mu.Unlock()
	if member == "" {
		return // never joined
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	client := r.offsets.client
	who := sarama.MemberIdentity{MemberId: member, GroupInstanceId: &instance}
	req := &sarama.LeaveGroupRequest{GroupId: r.cfg.Group, Version: 4}
	if client.Config().Version.IsAtLeast(sarama.V3_2_0_0) {
		req.Version = 5
		reason := "the static member stopped (LeaveOnStop)"
		who.Reason = &reason
	}
	req.Members = []sarama.MemberIdentity{who}
	err := r.offsets.retry(ctx, func(coord *sarama.Broker) error {
		resp, err := coord.LeaveGroup(req)
		if err != nil {
			_ = coord.Close()
			return err
		}
		if resp.Err != sarama.ErrNoError {
			return resp.Err
		}
		for _, m := range resp.Members {
			if m.Err != sarama.ErrNoError {
				return m.Err
			}
		}
		return nil
	})
	if err != nil {
		r.log.Warn("static member could not leave the group; its partitions move after the session timeout",
			"instance_id", instance, "member", member, "err", err)
		return
	}
	r.log.Info("static member left the group", "instance_id", instance, "member", member)
}

// fail records the first fatal error and stops the whole Run: the cancel
// ends the session's context, so every partition drains and makes its final
// commit, and Consume returns.
func (r *runner) fail(err error) {
	r.mu.Lock()
	first := r.err == nil
	if first {
		r.err = err
	}
	r.mu.Unlock()
	if first {
		r.log.Error("partition failed; stopping every partition", "err", err)
	}
	r.cancel(err)
}

func (r *runner) fatal() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// handler is the sarama.ConsumerGroupHandler of a Run.
type handler struct {
	r *runner

	mu      sync.Mutex
	initial map[int32]committed // fetched in Setup for the session's claims

	// revoked, when set (tests), is called once a claim's context was
	// cancelled because the claim was closed.
	revoked func(partition int32)
}

// Setup fetches the committed offset and metadata of every claimed
// partition with one request: the metadata carries every stage's position,
// which sarama's own offset fetch (it only hands the offset to the claim)
// does not expose.
func (h *handler) Setup(sess sarama.ConsumerGroupSession) error {
	claims := sess.Claims()[h.r.cfg.Topic]
	offs, err := h.r.offsets.fetch(sess.Context(), h.r.cfg.Topic, claims)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.initial = offs
	h.mu.Unlock()
	h.r.mu.Lock()
	h.r.memberID = sess.MemberID()
	h.r.mu.Unlock()
	h.r.log.Info("session started", "member", sess.MemberID(), "generation", sess.GenerationID(), "partitions", claims)
	return nil
}

// Cleanup runs after every claim returned, so every partition has made its
// final commit.
func (h *handler) Cleanup(sess sarama.ConsumerGroupSession) error {
	h.r.log.Info("session ended", "member", sess.MemberID(), "generation", sess.GenerationID())
	return nil
}

// takeInitial returns the offset Setup fetched for p, once. A claim added by
// a cooperative rebalance (no Setup) fetches its own.
func (h *handler) takeInitial(ctx context.Context, p int32) (committed, error) {
	h.mu.Lock()
	c, ok := h.initial[p]
	delete(h.initial, p)
	h.mu.Unlock()
	if ok {
		return c, nil
	}
	offs, err := h.r.offsets.fetch(ctx, h.r.cfg.Topic, []int32{p})
	if err != nil {
		return committed{}, err
	}
	return offs[p], nil
}

// ConsumeClaim runs the chain over the claimed partition and returns only
// when RunPartition has returned — after the partition drained and made its
// final commit — so a revoked partition is committed before the rebalance
// goes on, and its next owner starts where this one stopped.
func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	r := h.r
	topic, p := claim.Topic(), claim.Partition()
	ctx, release := h.claimContext(sess.Context(), claim)
	defer release()
	start, err := h.takeInitial(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		r.fail(&chain.PartitionError{Topic: topic, Partition: p, Err: err})
		return nil
	}
	if start.offset >= 0 && claim.InitialOffset() != start.offset {
		// sarama reset an out-of-range committed offset (or the offset
		// changed between its fetch and ours); the chain skips records
		// below its resume position either way.
		r.log.Warn("claim starts away from the committed offset",
			"partition", p, "committed", start.offset, "claim_start", claim.InitialOffset())
	}
	src := &claimSource{claim: claim, batch: r.cfg.fetchBatch(), poll: r.poll}
	if iv := r.cfg.probeInterval(); iv > 0 {
		src.probe = newLeaderProbe(r.probeClient, topic, p, iv)
		src.probe.start(ctx, &r.probes)
	}
	a := chain.Assignment{
		Topic:     topic,
		Partition: p,
		Committed: start.offset,
		Metadata:  start.metadata,
		Source:    src,
		Committer: &partitionCommitter{o: r.offsets, m: sess, topic: topic, partition: p},
	}
	if f := r.cfg.Hooks.Assigned; f != nil {
		f(topic, p, start.offset)
	}
	err = r.ch.RunPartition(ctx, a)
	if f := r.cfg.Hooks.Released; f != nil {
		f(topic, p, err)
	}
	switch {
	case err == nil:
	case errors.Is(err, chain.ErrShutdownTimeout), errors.Is(err, chain.ErrFinalCommit):
		// Not a failure of the partition: it stopped (revoke or shutdown);
		// what was not committed runs again at the next owner.
		r.log.Warn("partition stopped without committing everything it completed", "partition", p, "err", err)
	default:
		r.fail(err)
	}
	return nil
}

// claimErrors is the part of sarama's claim (a PartitionConsumer) that tells
// when it was closed: its Errors channel closes once the partition consumer
// stopped, whether or not anyone drained its Messages.
type claimErrors interface {
	Errors() <-chan *sarama.ConsumerError
}

// claimContext returns the context a claim's partition runs with: it ends
// with the session's (eager rebalance, shutdown) and, under a cooperative
// strategy, as soon as the claim is revoked. sarama tells a cooperative
// revoke only by closing the claim's Messages channel, after the messages
// it still buffers (up to Consumer.ChannelBufferSize); the fetcher would
// see it only once stage 0 worked through them, long after the
// revoke. The partition consumer's Errors channel closes at the same
// time without waiting for anyone to read, so a watcher ranges over it
// (logging what it carries, as the group's error log would) and cancels
// the claim's context when it closes. release stops the watcher and waits
// for it.
func (h *handler) claimContext(parent context.Context, claim sarama.ConsumerGroupClaim) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancel(parent)
	ce, ok := claim.(claimErrors)
	if !ok {
		return ctx, cancel
	}
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		defer cancel()
		errs := ce.Errors()
		for {
			select {
			case err, ok := <-errs:
				if !ok {
					// The claim was revoked or the session ends.
					cancel()
					if h.revoked != nil {
						h.revoked(claim.Partition())
					}
					return
				}
				h.r.log.Warn("consumer error", "partition", claim.Partition(), "err", err)
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		close(done)
		<-watched
	}
}

func closeLogged(log *slog.Logger, what string, c interface{ Close() error }) {
	if err := c.Close(); err != nil {
		log.Warn("close "+what, "err", err)
	}
}
