package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PauseFor is how long the coordinator scenario keeps its node paused:
// past the consumer group's session timeout (sarama's default, 10 s, which
// `differential run` keeps) and the brokers' own session timeout with the
// controller (broker.session.timeout.ms, 9 s), so the group's coordinator
// moves and the engine's member is expired by the old one.
const PauseFor = 15 * time.Second

// Scenarios are the suite: the faults Kafka's own system tests inject,
// each with its own workload seed.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "input-leader-kill", Seed: 1401, Guarantee: AtLeastOnce, Faults: inputLeaderKill, ExpectStall: true},
		{Name: "coordinator-pause", Seed: 1402, Guarantee: AtLeastOnce, Faults: coordinatorPause, ExpectStall: true},
		{Name: "rolling-restart", Seed: 1403, Guarantee: AtLeastOnce, Faults: rollingRestart},
		{Name: "output-leader-kill", Seed: 1404, Guarantee: AtLeastOnce, Faults: outputLeaderKill, ExpectStall: true},
		{Name: "broker-and-engine-kill", Seed: 1405, Guarantee: AtLeastOnce, Faults: brokerAndEngineKill},
		// The same faults in exactly-once mode: the engine is
		// killed with a transaction open; read_committed, nothing repeats.
		{Name: "exactly-once-broker-and-engine-kill", Seed: 1406, Guarantee: ExactlyOnce, Faults: brokerAndEngineKill},
		{Name: "exactly-once-rolling-restart", Seed: 1407, Guarantee: ExactlyOnce, Faults: rollingRestart},
		{Name: "exactly-once-coordinator-pause", Seed: 1408, Guarantee: ExactlyOnce, Faults: coordinatorPause, ExpectStall: true},
		{Name: "exactly-once-output-leader-kill", Seed: 1409, Guarantee: ExactlyOnce, Faults: outputLeaderKill, ExpectStall: true},
	}
}

// inputLeaderKill: the leader of the busiest input partition is SIGKILLed;
// once the engine has recovered on the new leader, the node is restarted.
func inputLeaderKill(ctx context.Context, r *Run) error {
	c := r.Cluster()
	p, n, err := leaderNotCoordinator(ctx, r, r.Input, r.Busiest)
	if err != nil {
		return err
	}
	what := "the busiest"
	if p != r.Busiest {
		what = fmt.Sprintf("the busiest, %d, is led by the group coordinator", r.Busiest)
	}
	if err := r.Fault(fmt.Sprintf("SIGKILL node %d (leads input partition %d; %s)", n, p, what),
		func() error { return c.Kill(ctx, n) }); err != nil {
		return err
	}
	if err := r.AwaitRecovery(ctx); err != nil {
		return err
	}
	return restartAndRecover(ctx, r, n)
}

// coordinatorPause: the group coordinator's node is SIGSTOPped for PauseFor,
// then continued.
func coordinatorPause(ctx context.Context, r *Run) error {
	c := r.Cluster()
	n, err := c.Coordinator(ctx, r.Group)
	if err != nil {
		return err
	}
	if err := r.Fault(fmt.Sprintf("SIGSTOP node %d (the group coordinator) for %s", n, PauseFor),
		func() error { return c.Pause(ctx, n) }); err != nil {
		return err
	}
	// The fault is the pause itself: its length is the point, so this
	// waits for time, not for a condition.
	select {
	case <-time.After(PauseFor):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := r.Fault(fmt.Sprintf("SIGCONT node %d", n), func() error { return c.Resume(ctx, n) }); err != nil {
		return err
	}
	if err := c.InSync(ctx); err != nil {
		return err
	}
	return r.AwaitRecovery(ctx)
}

// rollingRestart: every node in turn is stopped cleanly, restarted, and
// caught up (every replica in sync) before the next.
func rollingRestart(ctx context.Context, r *Run) error {
	c := r.Cluster()
	for n := 1; n <= ClusterNodes; n++ {
		if err := r.Fault(fmt.Sprintf("stop node %d (SIGTERM)", n), func() error { return c.Stop(ctx, n) }); err != nil {
			return err
		}
		if err := r.Restore(fmt.Sprintf("node %d back", n), func() error { return c.Restart(ctx, n) }); err != nil {
			return err
		}
		if err := c.InSync(ctx); err != nil {
			return err
		}
	}
	return r.AwaitRecovery(ctx)
}

// outputLeaderKill: once outputs are being written, the leader of the
// busiest output partition is SIGKILLed; after recovery it is restarted.
func outputLeaderKill(ctx context.Context, r *Run) error {
	c := r.Cluster()
	if err := r.AwaitOutputs(ctx, 200); err != nil {
		return err
	}
	busiest, err := r.BusiestOutput()
	if err != nil {
		return err
	}
	p, n, err := leaderNotCoordinator(ctx, r, r.Output, busiest)
	if err != nil {
		return err
	}
	if err := r.Fault(fmt.Sprintf("SIGKILL node %d (leads output partition %d, outputs in flight)", n, p),
		func() error { return c.Kill(ctx, n) }); err != nil {
		return err
	}
	if err := r.AwaitRecovery(ctx); err != nil {
		return err
	}
	return restartAndRecover(ctx, r, n)
}

// brokerAndEngineKill: the group coordinator's node and the engine are
// SIGKILLed at the same moment, right after outputs were acknowledged
// (their records most likely not committed yet, so the restart repeats
// them); the engine restarts at once on the same state directory, the node
// once the engine has recovered.
func brokerAndEngineKill(ctx context.Context, r *Run) error {
	c := r.Cluster()
	n, err := c.Coordinator(ctx, r.Group)
	if err != nil {
		return err
	}
	if err := r.AwaitFreshOutputs(ctx); err != nil {
		return err
	}
	err = r.Fault(fmt.Sprintf("SIGKILL node %d (the group coordinator) and the engine together", n), func() error {
		broker := make(chan error, 1)
		go func() { broker <- c.Kill(ctx, n) }()
		return errors.Join(r.KillEngine(), <-broker)
	})
	if err != nil {
		return err
	}
	if err := r.Restore("the engine restarted on its state directory", r.StartEngine); err != nil {
		return err
	}
	if err := r.AwaitRecovery(ctx); err != nil {
		return err
	}
	return restartAndRecover(ctx, r, n)
}

func restartAndRecover(ctx context.Context, r *Run, n int) error {
	c := r.Cluster()
	if err := r.Restore(fmt.Sprintf("node %d back", n), func() error { return c.Restart(ctx, n) }); err != nil {
		return err
	}
	if err := c.InSync(ctx); err != nil {
		return err
	}
	return r.AwaitRecovery(ctx)
}

// leaderNotCoordinator returns partition prefer of topic and its leader —
// or, when that node also coordinates the group, the first partition whose
// leader does not (prefer's when every leader does). A leader kill is meant
// to stall the engine's partitions until a new leader takes over, which
// /healthz must report (ExpectStall); killing the coordinator's node too
// ends the group session at once instead (connections refused: the engine
// releases its partitions and rejoins), a different fault, which is
// brokerAndEngineKill's and coordinatorPause's to cover.
func leaderNotCoordinator(ctx context.Context, r *Run, topic string, prefer int32) (partition int32, node int, err error) {
	c := r.Cluster()
	coord, err := c.Coordinator(ctx, r.Group)
	if err != nil {
		return 0, 0, err
	}
	n, err := c.Leader(ctx, topic, prefer)
	if err != nil || n != coord {
		return prefer, n, err
	}
	for p := range r.Partitions {
		m, err := c.Leader(ctx, topic, p)
		if err != nil {
			return 0, 0, err
		}
		if m != coord {
			return p, m, nil
		}
	}
	return prefer, n, nil
}
