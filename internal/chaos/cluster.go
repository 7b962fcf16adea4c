package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Cluster is a local Kafka cluster run by scripts/kafka.sh. Every fault goes
// through the script's per-node commands, so it acts only on the broker
// processes the script recorded (never on a process found by name).
type Cluster struct {
	script string   // path of scripts/kafka.sh
	env    []string // the DIFFERENTIAL_KAFKA_* settings, on top of os.Environ()
	addrs  []string
	owned  bool // started by OpenCluster: Close stops it
}

// ClusterNodes is the size of the cluster the suite needs.
const ClusterNodes = 3

// OpenCluster uses the 3-node cluster recorded by the script when one is
// (healing it: a node left stopped or paused by an interrupted run is
// brought back), and otherwise starts one with `kafka.sh start --brokers 3`
// (formatting fresh storage); Close then stops it. env holds
// DIFFERENTIAL_KAFKA_CACHE, _DATA and _PORT as the script reads them (nil:
// the suite's own environment's).
func OpenCluster(ctx context.Context, script string, env []string, logf func(string, ...any)) (*Cluster, error) {
	c := &Cluster{script: script, env: env}
	if nodes, err := c.Nodes(ctx); err == nil && len(nodes) == ClusterNodes && anyRunning(nodes) {
		out, _ := c.run(ctx, "status")
		c.addrs = parseBootstrap(out)
		if len(c.addrs) != ClusterNodes {
			return nil, fmt.Errorf("kafka.sh status lists bootstrap addresses %v, want %d", c.addrs, ClusterNodes)
		}
		if err := c.Heal(ctx); err != nil {
			return nil, err
		}
		logf("using the recorded %d-node cluster at %s", ClusterNodes, strings.Join(c.addrs, ","))
		return c, nil
	}
	start := time.Now()
	out, err := c.run(ctx, "start", "--brokers", strconv.Itoa(ClusterNodes))
	if err != nil {
		return nil, err
	}
	c.addrs = strings.Split(strings.TrimSpace(lastLine(out)), ",")
	c.owned = true
	logf("started a %d-node cluster at %s in %.1fs", ClusterNodes, strings.Join(c.addrs, ","), time.Since(start).Seconds())
	return c, nil
}

// Addrs are the bootstrap addresses of every node.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Close stops the cluster if OpenCluster started it, and otherwise heals
// it, so a cluster the suite was given is left whole.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if !c.owned {
		return c.Heal(ctx)
	}
	_, err := c.run(ctx, "stop")
	return err
}

// Kill SIGKILLs node n and waits until it is gone.
func (c *Cluster) Kill(ctx context.Context, n int) error { return c.node(ctx, "kill", n) }

// Stop stops node n cleanly (SIGTERM, controlled shutdown) and waits for it to exit.
func (c *Cluster) Stop(ctx context.Context, n int) error { return c.node(ctx, "stop", n) }

// Pause SIGSTOPs node n.
func (c *Cluster) Pause(ctx context.Context, n int) error { return c.node(ctx, "pause", n) }

// Resume SIGCONTs node n.
func (c *Cluster) Resume(ctx context.Context, n int) error { return c.node(ctx, "resume", n) }

// Restart starts a stopped or killed node n on its data and waits until it serves.
func (c *Cluster) Restart(ctx context.Context, n int) error { return c.node(ctx, "restart", n) }

// InSync waits until every replica of every partition is in sync.
func (c *Cluster) InSync(ctx context.Context) error {
	_, err := c.run(ctx, "insync")
	return err
}

// Leader returns the node leading topic's partition.
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (int, error) {
	out, err := c.run(ctx, "leader", topic, strconv.Itoa(int(partition)))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// Coordinator returns the node coordinating the consumer group.
func (c *Cluster) Coordinator(ctx context.Context, group string) (int, error) {
	out, err := c.run(ctx, "coordinator", group)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// NodeState is what `kafka.sh status` says of a node: "running", "paused" or
// "not running".
type NodeState string

// Nodes returns every recorded node's state, by node number (index 0: node 1).
func (c *Cluster) Nodes(ctx context.Context) ([]NodeState, error) {
	out, err := c.run(ctx, "status")
	if err != nil && !strings.Contains(out, "node-") {
		return nil, err // status exits 3 when a node is down; the listing is still there
	}
	var states []NodeState
	for _, m := range statusLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		for len(states) < n {
			states = append(states, "")
		}
		states[n-1] = NodeState(m[2])
	}
	return states, nil
}

var statusLine = regexp.MustCompile(`(?m)^node-(\d+): (running|paused|not running)`)

func anyRunning(states []NodeState) bool {
	for _, s := range states {
		if s == "running" || s == "paused" {
			return true
		}
	}
	return false
}

// Heal brings every node back — resumes paused ones, restarts stopped ones
// — and waits until every replica is in sync, so that the next scenario
// starts on a whole cluster.
func (c *Cluster) Heal(ctx context.Context) error {
	states, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	for i, s := range states {
		switch s {
		case "paused":
			err = c.Resume(ctx, i+1)
		case "not running":
			err = c.Restart(ctx, i+1)
		}
		if err != nil {
			return err
		}
	}
	return c.InSync(ctx)
}

func (c *Cluster) node(ctx context.Context, cmd string, n int) error {
	_, err := c.run(ctx, cmd, strconv.Itoa(n))
	return err
}

// run runs the script and returns its stdout; a failure's error carries
// stderr.
func (c *Cluster) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Env = append(os.Environ(), c.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("kafka.sh %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func parseBootstrap(status string) []string {
	for _, l := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(l, "bootstrap: "); ok {
			return strings.Split(strings.TrimSpace(rest), ",")
		}
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
