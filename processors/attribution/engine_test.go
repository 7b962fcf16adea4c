package attribution_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
	"github.com/differential-dev/differential/store"
)

// engineOutputs splits a tester's outputs by partition and stage kind,
// each in the order the engine produced them.
func engineOutputs(t *testing.T, msgs []chain.Message) map[int32]map[string][]reference.Output {
	out := map[int32]map[string][]reference.Output{}
	for _, m := range msgs {
		var src string
		for _, h := range m.Headers {
			if string(h.Key) == attribution.SourceHeader {
				src = string(h.Value)
			}
		}
		ps, os, ok := strings.Cut(src, "/")
		require.True(t, ok, "output without source header: %s", m.Value)
		p, err := strconv.Atoi(ps)
		require.NoError(t, err)
		o, err := strconv.ParseInt(os, 10, 64)
		require.NoError(t, err)
		var kind struct{ Kind string }
		require.NoError(t, json.Unmarshal(m.Value, &kind))
		if out[int32(p)] == nil {
			out[int32(p)] = map[string][]reference.Output{}
		}
		out[int32(p)][kind.Kind] = append(out[int32(p)][kind.Kind], reference.Output{Partition: int32(p), Offset: o, Key: m.Key, Value: m.Value})
	}
	return out
}

func requireSameOutputs(t *testing.T, stage string, want, got []reference.Output) {
	t.Helper()
	require.Equal(t, len(want), len(got), "stage %s: output count", stage)
	for i := range want {
		if want[i].Offset != got[i].Offset || !bytes.Equal(want[i].Value, got[i].Value) {
			t.Fatalf("stage %s output %d differs:\nwant @%d %s\ngot  @%d %s", stage, i, want[i].Offset, want[i].Value, got[i].Offset, got[i].Value)
		}
	}
}

// TestChainMatchesReferenceModel runs the attribution chain through the real
// engine (chaintest: in-memory partitions, the in-memory store) on generated
// workloads and checks the outputs equal the reference model's record for
// record, each stage's outputs in the offset order of its inputs, and the
// dead letters are exactly the invalid records.
func TestChainMatchesReferenceModel(t *testing.T) {
	cases := []struct {
		name     string
		lateness time.Duration
		distance int64
		buffer   int
		// slowLeaders makes the click and install stages take 1ms (fake
		// time) per record, so their followers run right behind the gate.
		slowLeaders bool
	}{
		{"defaults", 0, 0, 8192, false},
		{"lateness-10m-distance-5", 10 * time.Minute, 5, 8192, false},
		{"tiny-buffer-polling", 0, 0, 32, false},
		{"lateness-3h", 3 * time.Hour, 0, 256, false},
		{"lateness-3h-tight-gate", 3 * time.Hour, 0, 8192, true},
		{"lateness-0-tight-gate", 0, 0, 8192, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				wc := workload.DefaultConfig()
				wc.Records, wc.Partitions, wc.Users, wc.Seed = 6000, 3, 300, 11
				wc.Span = 4 * 24 * time.Hour
				wc.MaxRecordBytes = 4096
				recs := workload.Generate(wc)
				cfg := attribution.DefaultConfig()
				cfg.Lateness = tc.lateness
				cfg.MaxRecordBytes = wc.MaxRecordBytes
				st := store.NewMemory()
				stages := attribution.Chain(cfg)
				if tc.slowLeaders {
					for i := range 2 {
						stages[i].Processor = slow{stages[i].Processor}
					}
				}
				tt := chaintest.New(t, stages, attribution.Decoder(cfg),
					chain.WithStore(st), chain.WithLateness(tc.lateness), chain.WithOffsetDistance(tc.distance),
					chain.WithBufferSize(tc.buffer), chain.WithBatchSize(min(tc.buffer, 64)))
				parts := workload.Split(recs, wc.Partitions)
				for p := range parts {
					tt.Append(int32(p), parts[p]...)
				}
				tt.Start(0, 1, 2)
				tt.WaitIdle()
				require.NoError(t, tt.Stop())

				got := engineOutputs(t, tt.Outputs("output"))
				dlq := tt.Outputs("dlq")
				dlqByPart := map[int32][]int64{}
				for _, m := range dlq {
					var p, o int64
					for _, h := range m.Headers {
						switch string(h.Key) {
						case chain.HeaderDLQPartition:
							p, _ = strconv.ParseInt(string(h.Value), 10, 32)
						case chain.HeaderDLQOffset:
							o, _ = strconv.ParseInt(string(h.Value), 10, 64)
						}
					}
					dlqByPart[int32(p)] = append(dlqByPart[int32(p)], o)
				}
				total := 0
				for p := range parts {
					// The tester's logs assign offsets 0..n-1, as the split
					// records had for their partitions.
					want := reference.Run(tt.Log(int32(p)).Records(), cfg)
					requireSameOutputs(t, fmt.Sprintf("install/p%d", p), want.Installs, got[int32(p)]["install"])
					requireSameOutputs(t, fmt.Sprintf("purchase/p%d", p), want.Purchases, got[int32(p)]["purchase"])
					var inv []int64
					for _, x := range want.Invalid {
						inv = append(inv, x.Offset)
					}
					require.Equal(t, inv, dlqByPart[int32(p)], "partition %d dead letters", p)
					total += len(want.Installs) + len(want.Purchases)
				}
				require.Greater(t, total, 1000, "the workload must produce outputs")
				require.NotEmpty(t, dlq)
			})
		})
	}
}

// slow delays Process by 1ms of (fake) time; Sequence passes through.
type slow struct{ chain.Processor }

func (s slow) Process(ctx context.Context, pc *chain.Context, ev *chain.Event) error {
	time.Sleep(time.Millisecond)
	return s.Processor.Process(ctx, pc, ev)
}

func (s slow) Sequence(pc *chain.Context, ev *chain.Event) (bool, error) {
	return s.Processor.(chain.Sequencer).Sequence(pc, ev)
}
