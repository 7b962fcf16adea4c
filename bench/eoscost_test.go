package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
)

// TestEOSCostQuick runs the exactly-once cost table at tiny sizes (on the
// real cluster DIFFERENTIAL_TEST_BROKERS names, else the embedded broker):
// every (workload, interval, guarantee) cell is in the report, the table
// and the JSON; every cell's throughput run and latency run equal the
// reference model (exactly-once's read read_committed) and the throughput
// runs are steady (12.5 intervals, and the checkpoints on the busiest
// partition and the commits the options ask for); the exactly-once runs really ran transactions,
// the at-least-once runs none; the cost is 1 − eos ÷ alo.
func TestEOSCostQuick(t *testing.T) {
	brokers, dir, jsonPath := endToEnd(t, "runs the cost table at tiny sizes (about a minute)", "eos.json")
	intervals := []time.Duration{25 * time.Millisecond, 50 * time.Millisecond}
	o := Options{EOSCost: true, Quick: true, Brokers: brokers, Dir: dir, JSONPath: jsonPath, Partitions: 4, Workers: 16,
		CommitIntervals: intervals, LatencyDuration: 300 * time.Millisecond,
		// Three checkpoints, not ten: an exactly-once cycle here lasts
		// 0.3-0.5 s whatever the interval, and ten need inputs of a million
		// records. The rule's count is the harness's, tested on its own.
		checkpoints: 3}
	start := time.Now()
	rep, err := Run(context.Background(), o)
	require.NoError(t, err)
	t.Logf("the cost table took %v", time.Since(start))
	o = o.withDefaults()
	require.Equal(t, []string{"B", "A"}, o.Workloads, "the cost table's default workloads")
	require.Equal(t, Guarantees, o.Guarantees, "both guarantees by default")

	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table))
	text := table.String()
	t.Log("\n" + text)
	require.Contains(t, text, "| workload | commit interval | at-least-once rec/s | at-least-once p99 | exactly-once rec/s | exactly-once p99 | cost (1 − eos ÷ alo) |")

	require.True(t, rep.EOSCost)
	require.Len(t, rep.Workloads, 2)
	for i, w := range rep.Workloads {
		require.Equal(t, o.Workloads[i], w.Workload)
		require.Nil(t, w.Chain, "the cost table measures no design comparison")
		c := w.EOSCost
		require.NotNil(t, c, w.Workload)
		require.Equal(t, string(chain.GateKey), c.Gate, "Options.Gate's default")
		require.Len(t, c.Rows, len(intervals), w.Workload)
		for j, row := range c.Rows {
			iv := intervals[j]
			require.Equal(t, iv.String(), row.CommitInterval)
			require.Len(t, row.Cells, len(Guarantees))
			require.Positive(t, row.LatencyRateRPS)
			for k, g := range Guarantees {
				cell := row.Cells[k]
				what := fmt.Sprintf("%s %v %s", w.Workload, iv, g)
				require.Equal(t, g, cell.Guarantee, what)
				require.Equal(t, c.Gate, cell.Gate, what)
				d := cell.Run
				require.NotNil(t, d, what)
				require.NotNil(t, d.Correctness, what)
				require.True(t, d.Correctness.OK, "%s: %+v", what, d.Correctness)
				require.Positive(t, d.Correctness.Outputs, what)
				require.True(t, d.Steady, what)
				require.GreaterOrEqual(t, d.Elapsed, o.leastDuration(&chainVariant{commitInterval: iv}).Seconds(), what)
				require.GreaterOrEqual(t, d.CheckpointsMost, o.steadyCheckpoints(), what)
				require.GreaterOrEqual(t, d.Commits, o.steadyCheckpoints(), what)
				l := cell.Latency
				require.NotNil(t, l, what)
				require.NotNil(t, l.P99ms, what)
				require.Positive(t, l.Outputs, what)
				lc := l.Correctness
				require.NotNil(t, lc, what)
				require.Zero(t, lc.Missing+lc.Duplicates+lc.Unexpected+lc.OrderViolations, "%s latency run: %+v", what, lc)
				require.NotNil(t, cell.Txn, what)
				require.Positive(t, cell.Txn.Appends, "%s: the changelog is on in both guarantees", what)
				if g == GuaranteeExactlyOnce {
					require.GreaterOrEqual(t, cell.Txn.Commits, int64(o.steadyCheckpoints()), "%s: transactions committed", what)
				} else {
					require.Zero(t, cell.Txn.Commits, "%s: no transactions", what)
				}
				row := fmt.Sprintf("| %s (%s gate) | %v |", w.Workload, c.Gate, iv)
				require.Contains(t, text, row, "the markdown table has the row")
			}
			require.NotNil(t, row.Cost)
			require.InDelta(t, 1-row.Cells[1].Run.ThroughputRPS/row.Cells[0].Run.ThroughputRPS, *row.Cost, 1e-9)
		}
	}

	raw, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var objs []struct {
		Workload string `json:"workload"`
		EOSCost  struct {
			Gate string `json:"gate"`
			Rows []struct {
				CommitInterval string   `json:"commit_interval"`
				Cost           *float64 `json:"cost"`
				Cells          []struct {
					Guarantee string `json:"guarantee"`
					Run       struct {
						ThroughputRPS float64 `json:"throughput_rps"`
						Steady        bool    `json:"steady"`
					} `json:"run"`
					Latency struct {
						P99ms *float64 `json:"p99_ms"`
					} `json:"latency"`
				} `json:"cells"`
			} `json:"rows"`
		} `json:"eos_cost"`
	}
	require.NoError(t, json.Unmarshal(raw, &objs))
	require.Len(t, objs, 2)
	for i, obj := range objs {
		require.Equal(t, o.Workloads[i], obj.Workload)
		require.Len(t, obj.EOSCost.Rows, len(intervals))
		for j, row := range obj.EOSCost.Rows {
			require.Equal(t, intervals[j].String(), row.CommitInterval)
			require.NotNil(t, row.Cost)
			require.Len(t, row.Cells, 2)
			for k, cell := range row.Cells {
				require.Equal(t, Guarantees[k], cell.Guarantee)
				require.Positive(t, cell.Run.ThroughputRPS)
				require.True(t, cell.Run.Steady)
				require.NotNil(t, cell.Latency.P99ms)
			}
		}
	}
}

// TestEOSCostTarget: The exactly-once cost target is checked on the 1 s row only, met
// at ≤ 10 % in steady state, missed above it, and not met by a run that
// was not steady.
func TestEOSCostTarget(t *testing.T) {
	row := func(iv string, alo, eos float64, steady bool) CostRow {
		c := 1 - eos/alo
		return CostRow{CommitInterval: iv, Cost: &c, Cells: []CostCell{
			{Guarantee: GuaranteeAtLeastOnce, Run: &DesignResult{ThroughputRPS: alo, Steady: true}},
			{Guarantee: GuaranteeExactlyOnce, Run: &DesignResult{ThroughputRPS: eos, Steady: steady}},
		}}
	}
	for _, tc := range []struct {
		name     string
		rows     []CostRow
		met      bool
		why      bool
		checked  int
		wantCost float64
	}{
		{"met", []CostRow{row("100ms", 100, 50, true), row("1s", 100, 91, true), row("5s", 100, 50, true)}, true, false, 1, 0.09},
		{"missed", []CostRow{row("1s", 100, 89, true)}, false, false, 1, 0.11},
		{"not steady", []CostRow{row("1s", 100, 95, false)}, false, true, 1, 0.05},
		{"no 1s row", []CostRow{row("100ms", 100, 99, true)}, false, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := targets([]WorkloadResult{{Workload: "B", EOSCost: &CostResult{Gate: string(chain.GatePartition), Rows: tc.rows}}})
			require.Len(t, ts, tc.checked)
			if tc.checked == 0 {
				return
			}
			tg := ts[0]
			require.Contains(t, tg.Name, "commit interval 1s")
			require.True(t, tg.AtMost)
			require.Equal(t, CostTarget, tg.Want)
			require.InDelta(t, tc.wantCost, tg.Got, 1e-9)
			require.Equal(t, tc.met, tg.Met)
			require.Equal(t, tc.why, tg.Why != "")
		})
	}
}

// TestEOSCostOptions: the cost table's options are refused when wrong, and
// only go with EOSCost.
func TestEOSCostOptions(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Guarantees: []string{GuaranteeExactlyOnce}}, "--guarantees is for --eos-cost"},
		{Options{CommitIntervals: []time.Duration{time.Second}}, "--commit-intervals is for --eos-cost"},
		{Options{EOSCost: true, Guarantees: []string{"exactly-twice"}}, `--guarantees: unknown guarantee "exactly-twice" (want at-least-once or exactly-once)`},
		{Options{EOSCost: true, Guarantees: []string{GuaranteeAtLeastOnce, GuaranteeAtLeastOnce}}, `--guarantees: "at-least-once" given twice`},
		{Options{EOSCost: true, CommitIntervals: []time.Duration{time.Second, 0}}, "--commit-intervals: every interval must be > 0, got 0s"},
		{Options{EOSCost: true, CommitIntervals: []time.Duration{time.Second, time.Second}}, "--commit-intervals: 1s given twice"},
		{Options{EOSCost: true, Workloads: []string{"C"}}, "--workloads: the exactly-once cost table runs A and B, not C"},
	} {
		require.ErrorContains(t, tc.o.withDefaults().validate(), tc.want)
	}
	d := Options{EOSCost: true}.withDefaults()
	require.NoError(t, d.validate())
	require.Equal(t, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second}, d.CommitIntervals)
	require.Equal(t, []string{"B", "A"}, d.Workloads)
	require.Equal(t, costIdleTimeout, d.IdleTimeout)
	require.Equal(t, costDuration, d.Duration)
	require.Equal(t, 100*time.Millisecond, Options{}.withDefaults().IdleTimeout, "the design comparison keeps its own")
	require.Empty(t, Options{}.withDefaults().Guarantees, "the design comparison has no cost table")
}
