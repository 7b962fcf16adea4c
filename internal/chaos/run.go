package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/kadmin"
	"github.com/differential-dev/differential/internal/kfetch"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/processors/attribution"
)

// Guarantee is the delivery guarantee a scenario runs the engine with and
// checks: which repeated outputs it accepts.
type Guarantee string

const (
	// AtLeastOnce accepts repeated outputs and dead letters when they are
	// byte-identical to their first copy (DESIGN I6: a crash, or a
	// partition restarted at its committed position, repeats work).
	AtLeastOnce Guarantee = "at-least-once"
	// ExactlyOnce accepts no repeat at all (read_committed). The engine
	// gets --guarantee exactly-once.
	ExactlyOnce Guarantee = "exactly-once"
)

// Scenario is one fault schedule with its own workload seed.
type Scenario struct {
	Name      string
	Seed      uint64
	Guarantee Guarantee
	// Faults runs once the engine is processing the streaming input, and
	// returns when the cluster is whole again (every node serving, every
	// replica in sync) and the engine has recovered. It injects faults
	// through r.Fault so each one is timed.
	Faults func(ctx context.Context, r *Run) error
	// ExpectStall: the fault stops some partition for longer than the
	// engine's stall timeout, so its /healthz must answer "503 stalled" at
	// some point after the first fault (and 200 again at the end, which
	// every scenario checks). A scenario fails when the engine does not
	// see the stall it was dealt.
	ExpectStall bool
}

// Config is what every scenario shares.
type Config struct {
	Cluster *Cluster
	// Bin is the differential CLI; every engine is `Bin run …`.
	Bin string
	// Dir holds each scenario's state directories and engine logs.
	Dir string
	// The workload: Records generated records over Partitions partitions
	// and Users users, one hot partition.
	Records, Partitions, Users int
	// Warmup records are written (Burst every Tick) and committed before
	// the faults start; the stream keeps that pace during the faults and
	// holds back the last TailFrac of the records until the schedule is
	// done, so records keep arriving after every fault.
	Warmup   int
	Burst    int
	Tick     time.Duration
	TailFrac float64
	// Engine settings. IdleTimeout must exceed the longest time the input
	// can stop moving during a schedule (an injected stall or a schedule
	// that outlasts the paced records): a release by idleness lets an
	// install pass before its partition's later clicks are read, which
	// makes the outputs depend on timing (DESIGN.md "Mechanisms").
	CommitInterval, IdleTimeout, StallTimeout time.Duration
	// StepTimeout bounds every wait of a run (recovery, completion, a
	// clean stop).
	StepTimeout time.Duration
	// BreakEnv, if set, is added to every engine's environment, and
	// BreakMarker is created at the first fault: for a CLI built with the
	// chaosbreak tag, which then breaks itself on purpose.
	BreakEnv    []string
	BreakMarker string
	// Check judges what the engine wrote.
	Check Checker
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// Run is one scenario in progress; fault schedules use its methods.
type Run struct {
	cfg *Config
	sc  *Scenario
	dir string

	Input, Output, DLQ, Group string
	Partitions                int32
	// Busiest is the input partition with the most records.
	Busiest int32

	start  time.Time
	lag    *lagSampler
	outLag *lagSampler // the output topic's end offsets (no group)
	health *healthWatcher
	stream *Stream

	released time.Time // when the stream's tail was released: the schedule's end

	mu      sync.Mutex
	engine  *Engine
	engines int
	faults  []Fault
}

// Fault is one injected fault and how long the engine took to recover.
type Fault struct {
	What string
	At   time.Duration // since the run started
	// Recovery: from the fault (or, for a Restore, from when the node or
	// engine was back) until every partition was caught up again and
	// stayed so (see lagSampler.recovered): records written after the
	// fault committed, and none written more than CatchUpWindow earlier
	// left uncommitted. -1: never.
	Recovery time.Duration
	at       time.Time
}

// Cluster is the cluster under test.
func (r *Run) Cluster() *Cluster { return r.cfg.Cluster }

// Logf logs a line prefixed with the time since the run started.
func (r *Run) Logf(format string, args ...any) {
	r.cfg.Logf("[%6.1fs] %s: %s", time.Since(r.start).Seconds(), r.sc.Name, fmt.Sprintf(format, args...))
}

// Fault marks the time of a fault named what, then injects it with do.
func (r *Run) Fault(what string, do func() error) error {
	r.mu.Lock()
	first := len(r.faults) == 0
	r.mu.Unlock()
	r.mark(what)
	if first && r.cfg.BreakMarker != "" {
		if err := os.WriteFile(r.cfg.BreakMarker, nil, 0o644); err != nil {
			return err
		}
	}
	r.Logf("fault: %s", what)
	if err := do(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Restore brings back what a fault took away (restarts a node or an
// engine) with do, and marks the time it is back — when it is serving
// again, which is when partitions move back to it — as a fault named what.
func (r *Run) Restore(what string, do func() error) error {
	r.Logf("restoring: %s", what)
	if err := do(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.mark(what)
	r.Logf("restored: %s", what)
	return nil
}

func (r *Run) mark(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.faults = append(r.faults, Fault{What: what, At: now.Sub(r.start), at: now})
}

// AwaitRecovery waits until the engine has recovered from the last fault
// (Fault.Recovery).
func (r *Run) AwaitRecovery(ctx context.Context) error {
	r.mu.Lock()
	if len(r.faults) == 0 {
		r.mu.Unlock()
		return errors.New("AwaitRecovery: no fault yet")
	}
	f := r.faults[len(r.faults)-1]
	r.mu.Unlock()
	err := r.awaitLag(ctx, "recovery from "+f.What, func(lagSample) bool {
		_, ok := r.lag.recovered(f.at)
		return ok
	})
	if err != nil && r.stream.Holding() {
		err = fmt.Errorf("%w; the stream wrote every paced record before the schedule ended, so no new record came to show a recovery: give the scenario more Records or a faster pace", err)
	}
	if err == nil {
		at, _ := r.lag.recovered(f.at)
		r.Logf("recovered from %s after %.1fs", f.What, at.Sub(f.at).Seconds())
	}
	return err
}

// AwaitOutputs waits until the output topic holds at least n more records
// than when it is called: outputs are being written.
func (r *Run) AwaitOutputs(ctx context.Context, n int64) error {
	s, _, _ := r.outLag.latest()
	from := s.end
	abort, abortErr := r.engineExit()
	return r.outLag.await(ctx, r.cfg.StepTimeout, fmt.Sprintf("%d more outputs", n), func(s lagSample) bool { return s.end >= from+n }, abort, abortErr)
}

// awaitLag waits until cond holds for the input's latest lag sample; it
// fails at once if the engine exits.
func (r *Run) awaitLag(ctx context.Context, what string, cond func(lagSample) bool) error {
	abort, abortErr := r.engineExit()
	return r.lag.await(ctx, r.cfg.StepTimeout, what, cond, abort, abortErr)
}

// engineExit returns a channel closed when the running engine exits (nil
// if none runs) and the error to report then: an engine exits only when
// the schedule kills it, which first takes it out of the run.
func (r *Run) engineExit() (<-chan struct{}, func() error) {
	e := r.currentEngine()
	if e == nil {
		return nil, nil
	}
	return e.Exited(), func() error {
		return fmt.Errorf("differential run (pid %d) exited by itself: %w", e.Pid(), e.Err())
	}
}

// AwaitFreshOutputs returns as soon as the output topic grows (read every
// 10 ms): the engine has just had outputs acknowledged, and the records
// they came from are most likely not committed yet (commits come every
// CommitInterval), so a kill now leaves work to repeat.
func (r *Run) AwaitFreshOutputs(ctx context.Context) error {
	client, err := sarama.NewClient(r.cfg.Cluster.Addrs(), samplerConfig())
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	end := func() (int64, error) {
		var sum int64
		for p := range r.Partitions {
			o, err := client.GetOffset(r.Output, p, sarama.OffsetNewest)
			if err != nil {
				return 0, err
			}
			sum += o
		}
		return sum, nil
	}
	from, err := end()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.cfg.StepTimeout)
	for time.Now().Before(deadline) {
		n, err := end()
		if err != nil {
			return err
		}
		if n > from {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond): // polling the broker: nothing to block on
		}
	}
	return fmt.Errorf("no new output within %s", r.cfg.StepTimeout)
}

// BusiestOutput returns the output partition holding the most records.
func (r *Run) BusiestOutput() (int32, error) {
	client, err := sarama.NewClient(r.cfg.Cluster.Addrs(), samplerConfig())
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	best, most := int32(0), int64(-1)
	for p := range r.Partitions {
		end, err := client.GetOffset(r.Output, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		if end > most {
			best, most = p, end
		}
	}
	return best, nil
}

// KillEngine SIGKILLs the running engine.
func (r *Run) KillEngine() error {
	r.mu.Lock()
	e := r.engine
	r.engine = nil
	r.mu.Unlock()
	if e == nil {
		return errors.New("no engine runs")
	}
	return e.Kill()
}

// StartEngine starts an engine on the run's state directory (the same one
// every time, as a restarted process on the same host would).
func (r *Run) StartEngine() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.engine != nil {
		return errors.New("an engine runs already")
	}
	r.engines++
	log := filepath.Join(r.dir, fmt.Sprintf("engine-%d.log", r.engines))
	e, err := StartEngine(r.cfg.Bin, r.engineArgs(), r.cfg.BreakEnv, log)
	if err != nil {
		return err
	}
	r.engine = e
	r.Logf("engine %d started (pid %d, log %s)", r.engines, e.Pid(), log)
	return nil
}

func (r *Run) engineArgs() []string {
	args := []string{"run",
		"--brokers", strings.Join(r.cfg.Cluster.Addrs(), ","),
		"--topic", r.Input, "--output", r.Output, "--dlq", r.DLQ, "--group", r.Group,
		"--state-dir", filepath.Join(r.dir, "state"),
		"--commit-interval", r.cfg.CommitInterval.String(),
		"--idle-timeout", r.cfg.IdleTimeout.String(),
		"--stall-timeout", r.cfg.StallTimeout.String(),
		"--metrics-addr", "127.0.0.1:0",
		"--max-record-bytes", fmt.Sprint(maxRecordBytes),
		"--log-format", "json", "--log-level", "info",
	}
	// Always named: the engine's default is exactly-once, and a scenario
	// without ExactlyOnce accepts repeats, which only at-least-once writes.
	g := AtLeastOnce
	if r.sc.Guarantee == ExactlyOnce {
		g = ExactlyOnce
	}
	return append(args, "--guarantee", string(g))
}

func (r *Run) currentEngine() *Engine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engine
}

func (r *Run) metricsAddr() string {
	if e := r.currentEngine(); e != nil {
		return e.MetricsAddr()
	}
	return ""
}

// maxRecordBytes is the workload's (and the engine's) record size limit:
// small, so the oversized malformed records stay small too.
const maxRecordBytes = 16 << 10

// Result is what a scenario reports.
type Result struct {
	Scenario  string
	Seed      uint64
	Guarantee Guarantee
	// RecordsIn were read back from the input topic (the workload plus one
	// end-of-stream marker per partition).
	RecordsIn int
	// Outputs and DeadLetters count every record read back (read_committed),
	// repeats included; Verdict counts them per input record.
	Outputs, DeadLetters int
	Verdict              Verdict
	Faults               []Fault
	// Health lists what /healthz answered, from the first fault on, as
	// "status +seconds" changes.
	Health []string
	// IdleReleases is the largest idle-release count /metrics showed: 0
	// means no follower was released by idleness, so the outputs cannot
	// depend on timing.
	IdleReleases int64
	// MaxLag is the largest lag sampled from the first fault to the end of
	// the schedule (the held-back tail, written at once after it, is not
	// counted).
	MaxLag int64
	Took   time.Duration
	// Err is the first error (a failed step or a failed check).
	Err error
}

// Recovery is the longest recovery of the run's faults.
func (res *Result) Recovery() time.Duration {
	var m time.Duration
	for _, f := range res.Faults {
		m = max(m, f.Recovery)
	}
	return m
}

// Execute runs one scenario and returns its result; Result.Err says what
// failed. Topics are deleted afterwards; the engine is stopped or killed.
func Execute(ctx context.Context, cfg *Config, sc Scenario) *Result {
	res := &Result{Scenario: sc.Name, Seed: sc.Seed, Guarantee: sc.Guarantee}
	r := &Run{cfg: cfg, sc: &sc, start: time.Now(), Partitions: int32(cfg.Partitions)}
	res.Err = r.execute(ctx, res)
	res.Took = time.Since(r.start)
	r.summarize(res)
	if res.Err != nil {
		if e := r.currentEngine(); e != nil {
			res.Err = fmt.Errorf("%w\nlast lines of the engine's log:\n%s", res.Err, e.Tail())
		}
	}
	return res
}

func (r *Run) execute(ctx context.Context, res *Result) (err error) {
	cfg := r.cfg
	base := fmt.Sprintf("chaos-%s-%x", r.sc.Name, r.start.UnixNano()&0xffffff)
	r.Input, r.Output, r.DLQ, r.Group = base+"-in", base+"-out", base+"-dlq", base
	r.dir = filepath.Join(cfg.Dir, r.sc.Name)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	if cfg.BreakMarker != "" {
		_ = os.Remove(cfg.BreakMarker)
	}
	if err := createTopics(cfg.Cluster.Addrs(), map[string]int32{r.Input: r.Partitions, r.Output: r.Partitions, r.DLQ: 1}); err != nil {
		return err
	}
	// The engine creates its changelog topic itself (differential run --changelog, the default).
	defer deleteTopics(cfg.Cluster.Addrs(), r.Input, r.Output, r.DLQ, kafka.ChangelogTopic(r.Group, r.Input))

	recs := r.workload()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	r.lag = newLagSampler(cfg.Cluster.Addrs(), r.Input, r.Group, r.Partitions, 100*time.Millisecond)
	trace, err := os.Create(filepath.Join(r.dir, "lag.tsv"))
	if err != nil {
		return err
	}
	defer func() { _ = trace.Close() }()
	r.lag.trace, r.lag.t0 = trace, r.start
	r.outLag = newLagSampler(cfg.Cluster.Addrs(), r.Output, "", r.Partitions, 250*time.Millisecond)
	r.health = newHealthWatcher(r.metricsAddr, 250*time.Millisecond)
	r.health.logf = r.Logf
	bg.Go(func() { r.lag.run(ctx) })
	bg.Go(func() { r.outLag.run(ctx) })
	healthCtx, stopHealth := context.WithCancel(ctx)
	defer stopHealth()
	bg.Go(func() { r.health.run(healthCtx) })

	if err := r.StartEngine(); err != nil {
		return err
	}
	defer func() {
		if e := r.currentEngine(); e != nil && err != nil {
			_ = e.Kill()
		}
	}()
	hold := len(recs) - int(float64(len(recs))*cfg.TailFrac)
	r.stream = NewStream(cfg.Cluster.Addrs(), r.Input, recs, cfg.Burst, cfg.Tick, hold)
	r.stream.onHold = func() {
		r.Logf("the stream wrote every paced record before the schedule ended; the input pauses until it does")
	}
	streamErr := make(chan error, 1)
	bg.Go(func() { streamErr <- r.stream.Run(ctx) })

	warm := int64(min(cfg.Warmup, hold))
	if err := r.awaitLag(ctx, "warm-up", func(s lagSample) bool { return s.committed >= warm/2 && s.end >= warm }); err != nil {
		return r.withStream(err, streamErr)
	}
	r.Logf("warmed up: %d records written, the engine committed some; injecting faults", warm)
	if err := r.sc.Faults(ctx, r); err != nil {
		return r.withStream(fmt.Errorf("fault schedule: %w", err), streamErr)
	}
	r.released = time.Now()
	r.stream.Release()
	if err := <-streamErr; err != nil {
		return err
	}
	total := int64(len(recs))
	if err := r.awaitLag(ctx, "every record committed", func(s lagSample) bool { return s.end == total && s.committed == total }); err != nil {
		return err
	}
	r.Logf("every record committed")
	health, err := r.awaitHealthy(ctx)
	if err != nil {
		return err
	}
	stopHealth() // the stop below is not a change of health
	if r.sc.ExpectStall {
		evs, _ := r.health.snapshot()
		if err := stallReported(evs, r.firstFault()); err != nil {
			return err
		}
	}
	if err := r.currentEngine().Stop(cfg.StepTimeout); err != nil {
		return err
	}
	r.Logf("engine stopped cleanly (exit 0); /healthz at the end: %s", health)
	cancel()
	bg.Wait()
	return r.verify(recs, res)
}

// summarize fills in the faults' recovery times, the health changes from
// the first fault on, the largest lag and the idle releases.
func (r *Run) summarize(res *Result) {
	r.mu.Lock()
	faults := append([]Fault(nil), r.faults...)
	r.mu.Unlock()
	if r.lag == nil {
		return
	}
	for i := range faults {
		if at, ok := r.lag.recovered(faults[i].at); ok {
			faults[i].Recovery = at.Sub(faults[i].at)
		} else {
			faults[i].Recovery = -1
		}
	}
	res.Faults = faults
	if len(faults) > 0 {
		end := r.released
		if end.IsZero() {
			end = time.Now()
		}
		res.MaxLag = r.lag.maxLag(faults[0].at, end)
	}
	evs, idle := r.health.snapshot()
	res.IdleReleases = idle
	if len(faults) == 0 {
		return
	}
	t0 := faults[0].at
	for i, ev := range evs {
		if ev.at.Before(t0) && (i+1 < len(evs) && !evs[i+1].at.After(t0)) {
			continue // superseded before the first fault
		}
		rel := max(ev.at.Sub(t0), 0)
		res.Health = append(res.Health, fmt.Sprintf("%s +%.1fs", ev.status, rel.Seconds()))
	}
}

// withStream adds the stream's error, if it failed, to err.
func (r *Run) withStream(err error, streamErr <-chan error) error {
	select {
	case se := <-streamErr:
		if se != nil {
			return fmt.Errorf("%w (the input stream failed first: %w)", err, se)
		}
	default:
	}
	return err
}

// firstFault is when the first fault was injected (zero: none was).
func (r *Run) firstFault() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.faults) == 0 {
		return time.Time{}
	}
	return r.faults[0].at
}

// stallReported checks that /healthz answered "503 stalled" at or after t0
// (the first fault), for a scenario that injects a stall.
func stallReported(evs []healthEvent, t0 time.Time) error {
	if t0.IsZero() {
		return errors.New("/healthz: no fault was injected, so no stall could be reported")
	}
	var seen []string
	for _, ev := range evs {
		if ev.at.Before(t0) {
			continue
		}
		if ev.status == "503 stalled" {
			return nil
		}
		seen = append(seen, ev.status)
	}
	return fmt.Errorf("/healthz never reported the injected stall (503 stalled) after the first fault; it answered %v", seen)
}

// awaitHealthy waits until /healthz answers 200: the engine has recovered
// in its own view too.
func (r *Run) awaitHealthy(ctx context.Context) (string, error) {
	deadline := time.Now().Add(r.cfg.StepTimeout)
	for {
		evs, _ := r.health.snapshot()
		if n := len(evs); n > 0 && strings.HasPrefix(evs[n-1].status, "200") {
			return evs[n-1].body, nil
		}
		if time.Now().After(deadline) {
			last := "nothing"
			if n := len(evs); n > 0 {
				last = evs[n-1].status + ": " + evs[n-1].body
			}
			return "", fmt.Errorf("/healthz did not answer 200 within %s of the end (last: %s)", r.cfg.StepTimeout, last)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(r.health.interval):
		}
	}
}

// workload generates the scenario's records and appends one end-of-stream
// marker per partition.
func (r *Run) workload() []workload.Record {
	wc := workload.DefaultConfig()
	wc.Seed, wc.Records, wc.Partitions, wc.Users = r.sc.Seed, r.cfg.Records, r.cfg.Partitions, r.cfg.Users
	wc.HotPartitions, wc.HotFrac = 1, 0.3
	wc.MaxRecordBytes = maxRecordBytes
	wc.Topic = r.Input
	recs := workload.Generate(wc)
	counts := make([]int, r.cfg.Partitions)
	for _, rec := range recs {
		counts[rec.Partition]++
	}
	for p, n := range counts {
		if n > counts[r.Busiest] {
			r.Busiest = int32(p)
		}
	}
	return append(recs, endMarkers(recs, r.cfg.Partitions, r.Input)...)
}

// endMarkers returns, for each partition, a valid click later than every
// event of the workload. The install and purchase stages skip a click, and
// a skipped record waits only for its leader's position (DESIGN.md "Mechanisms"), so the
// marker lets every stage pass the partition's last real record on the
// gate's own rule instead of an idle release: the tail costs no
// IdleTimeout, and IdleTimeout can stay above every injected stall.
func endMarkers(recs []workload.Record, partitions int, topic string) []workload.Record {
	var last time.Time
	for _, r := range recs {
		if r.Timestamp.After(last) {
			last = r.Timestamp
		}
	}
	// A valid event may be up to MaxClockSkew (1 h) ahead of its record
	// timestamp; the marker's event time is beyond that, and 59 minutes
	// ahead of its own timestamp, inside the skew allowed.
	ts := last.Add(2 * time.Minute)
	at := ts.Add(59 * time.Minute).UTC().Format(time.RFC3339Nano)
	next := make([]int64, partitions)
	for _, r := range recs {
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
	}
	out := make([]workload.Record, partitions)
	for p := range partitions {
		user := fmt.Sprintf("end-of-stream-%d", p)
		out[p] = workload.Record{Kind: "click/end-of-stream", Record: chain.Record{
			Topic: topic, Partition: int32(p), Offset: next[p], Key: []byte(user), Timestamp: ts,
			Value: fmt.Appendf(nil, `{"event_id":"%s","type":"click","user_id":"%s","time":"%s","campaign_id":"end-of-stream"}`, user, user, at),
		}}
	}
	return out
}

// verify reads the topics back (read_committed), checks that the input is
// the workload, then checks the outputs and dead letters.
func (r *Run) verify(recs []workload.Record, res *Result) error {
	client, err := sarama.NewClient(r.cfg.Cluster.Addrs(), samplerConfig())
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.StepTimeout)
	defer cancel()
	read := func(topic string) (map[int32][]*sarama.ConsumerMessage, error) {
		// The engine's last transaction's markers land after its commit
		// returned: a read at once could end before its outputs.
		if err := kfetch.WaitStable(ctx, client, topic); err != nil {
			return nil, err
		}
		return kfetch.ReadTopic(ctx, client, topic, true)
	}
	in, err := read(r.Input)
	if err != nil {
		return err
	}
	outs, err := read(r.Output)
	if err != nil {
		return err
	}
	dlq, err := read(r.DLQ)
	if err != nil {
		return err
	}
	inputs := make([][]chain.Record, r.Partitions)
	for p := range r.Partitions {
		for _, m := range in[p] {
			inputs[p] = append(inputs[p], toRecord(m))
		}
		res.RecordsIn += len(in[p])
	}
	for _, ms := range outs {
		res.Outputs += len(ms)
	}
	for _, ms := range dlq {
		res.DeadLetters += len(ms)
	}
	if err := sameInput(recs, inputs); err != nil {
		return fmt.Errorf("the input topic is not the workload the stream wrote (a producer or broker problem, not the engine's): %w", err)
	}
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = maxRecordBytes
	cfg.IdleTimeout = r.cfg.IdleTimeout // the engine's, for the model's horizons
	res.Verdict = r.cfg.Check(inputs, cfg, outs, dlq, r.sc.Guarantee)
	if !res.Verdict.OK {
		return errors.New(res.Verdict.Summary)
	}
	return nil
}

func toRecord(m *sarama.ConsumerMessage) chain.Record {
	rec := chain.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
	for _, h := range m.Headers {
		if h != nil {
			rec.Headers = append(rec.Headers, chain.Header{Key: h.Key, Value: h.Value})
		}
	}
	return rec
}

// sameInput checks that each partition holds exactly the planned records,
// in order (an idempotent producer neither loses, repeats nor reorders).
func sameInput(recs []workload.Record, got [][]chain.Record) error {
	want := make([][]workload.Record, len(got))
	for _, r := range recs {
		want[r.Partition] = append(want[r.Partition], r)
	}
	for p := range got {
		if len(got[p]) != len(want[p]) {
			return fmt.Errorf("partition %d holds %d records, the workload has %d", p, len(got[p]), len(want[p]))
		}
		for i := range got[p] {
			if !bytes.Equal(got[p][i].Key, want[p][i].Key) || !bytes.Equal(got[p][i].Value, want[p][i].Value) {
				return fmt.Errorf("partition %d offset %d is not the workload's record %d of that partition", p, got[p][i].Offset, i)
			}
		}
	}
	return nil
}

// createTopics creates each topic with replication factor 3 and
// min.insync.replicas 2 (an acknowledged write survives one lost broker;
// one broker down still takes writes), no retention limit (kadmin.NewTopic),
// and no limit on how far in the future a record timestamp may be (the
// workload's timestamps are fixed in November 2026; Kafka 4 rejects those
// more than an hour ahead of the broker's clock), and waits for their
// leaders.
func createTopics(addrs []string, topics map[string]int32) error {
	admin, err := sarama.NewClusterAdmin(addrs, kadmin.ProbeConfig())
	if err != nil {
		return err
	}
	defer func() { _ = admin.Close() }()
	minISR, anyTime := "2", "9223372036854775807"
	for name, parts := range topics {
		d := kadmin.NewTopic(parts)
		d.ReplicationFactor = ClusterNodes
		d.ConfigEntries["min.insync.replicas"] = &minISR
		d.ConfigEntries["message.timestamp.after.max.ms"] = &anyTime
		if err := admin.CreateTopic(name, d, false); err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
	}
	for name, parts := range topics {
		if err := kadmin.AwaitLeaders(addrs, kadmin.ProbeConfig(), name, parts, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func deleteTopics(addrs []string, topics ...string) {
	admin, err := sarama.NewClusterAdmin(addrs, kadmin.ProbeConfig())
	if err != nil {
		return
	}
	defer func() { _ = admin.Close() }()
	for _, t := range topics {
		_ = admin.DeleteTopic(t)
	}
}
