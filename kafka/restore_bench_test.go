package kafka_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/testbroker"
	"github.com/differential-dev/differential/kafka"
	"github.com/differential-dev/differential/store"
)

// blockedSource is an assigned partition with no input: Fetch waits for the
// end of the claim.
type blockedSource struct{}

func (blockedSource) Fetch(ctx context.Context, dst []chain.Record) ([]chain.Record, error) {
	<-ctx.Done()
	return dst, ctx.Err()
}
func (blockedSource) HighWatermark() int64 { return -1 }
func (blockedSource) Poll(context.Context, int64) (chain.Poller, error) {
	return nil, fmt.Errorf("no polling")
}

type nopCommitter struct{}

func (nopCommitter) Commit(context.Context, int64, string) error { return nil }

// restoredStore signals when a partition's restore is finished.
type restoredStore struct {
	chain.Store
	done chan struct{}
}

func (s restoredStore) OpenPartition(topic string, p int32, stages []string) (chain.PartitionStore, error) {
	ps, err := s.Store.OpenPartition(topic, p, stages)
	if err != nil {
		return nil, err
	}
	return restoredPartition{ps.(chain.ChangelogStore), s.done}, nil
}

type restoredPartition struct {
	chain.ChangelogStore
	done chan struct{}
}

func (p restoredPartition) FinishRestore(cps []commit.Checkpoint, off int64) error {
	err := p.ChangelogStore.FinishRestore(cps, off)
	close(p.done)
	return err
}

// restoreEntries is the changelog size of BenchmarkRestore
// (DIFFERENTIAL_RESTORE_ENTRIES overrides it).
func restoreEntries() int {
	if n, err := strconv.Atoi(os.Getenv("DIFFERENTIAL_RESTORE_ENTRIES")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// BenchmarkRestore measures how fast a partition's state is rebuilt from
// its changelog — the path a partition takes when it moves to an instance
// without its state: one changelog partition of 1,000,000 distinct entries
// (keys of 20-odd bytes, values of 60 bytes with an expiry, as the
// attribution state's), restored by RunPartition into an empty Pebble store
// up to the committed changelog offset. Reported: entries/s, MB/s of
// changelog records, and the Go heap's peak during the restore (sampled
// every 10 ms).
//
//	go test ./kafka -run XXX -bench Restore -benchtime 1x
func BenchmarkRestore(b *testing.B) {
	n := restoreEntries()
	br := testbroker.New(b)
	topic := br.Topic(b, 1)
	group := testbroker.Name(b, "restore")
	cl, err := kafka.NewChangelog(context.Background(), kafka.ChangelogConfig{Brokers: br.Addrs(), InputTopic: topic, Group: group, Sarama: br.Config()})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if br.Real() {
		defer deleteTopic(b, br, cl.Topic())
	}
	stages := []string{"state"}
	end, bytes := fillChangelog(b, cl, topic, stages, n)
	md, err := commit.EncodeState(0, commit.State{Stages: []commit.Checkpoint{{Stage: "state", Next: 0}}, Changelog: end})
	if err != nil {
		b.Fatal(err)
	}
	noop := chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })

	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		db, err := store.OpenPebble(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		ch, err := chain.New([]chain.Stage{{Name: "state", Processor: noop}}, decoder,
			chain.WithStore(restoredStore{db, done}), chain.WithChangelog(cl))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		stopSampling := sampleHeap()
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		b.StartTimer()
		began, cpu0 := time.Now(), cpuTime()
		go func() {
			ran <- ch.RunPartition(ctx, chain.Assignment{Topic: topic, Partition: 0, Committed: 0, Metadata: md,
				Source: blockedSource{}, Committer: nopCommitter{}})
		}()
		select {
		case <-done:
		case err := <-ran:
			b.Fatalf("the partition stopped before its restore finished: %v", err)
		}
		took, cpu := time.Since(began), cpuTime()-cpu0
		b.StopTimer()
		heap := stopSampling()
		st := ch.Stats()
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		if len(st) != 1 || st[0].Restore.Records != int64(n) {
			b.Fatalf("restored %+v, want %d records", st, n)
		}
		entries, err := db.Entries(topic, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(entries) != n {
			b.Fatalf("%d entries after the restore, want %d", len(entries), n)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/took.Seconds(), "entries/s")
		b.ReportMetric(float64(bytes)/took.Seconds()/1e6, "MB/s")
		b.ReportMetric(float64(n)/cpu.Seconds(), "entries/cpu-s")
		b.ReportMetric(float64(heap-before.HeapInuse)/1e6, "peak-heap-MB")
		broker := "the process only; the broker is another process"
		if !br.Real() {
			broker = "the embedded broker's share included"
		}
		b.Logf("%d entries restored in %s (%.0f entries/s), %s of CPU (%.0f entries/cpu-s; %s), peak Go heap %.0f MB above the %.0f MB before",
			n, took.Round(time.Millisecond), float64(n)/took.Seconds(), cpu.Round(time.Millisecond), float64(n)/cpu.Seconds(), broker,
			float64(heap-before.HeapInuse)/1e6, float64(before.HeapInuse)/1e6)
		b.StartTimer()
	}
}

// sampleHeap samples the Go heap in use every 10 ms until stop is called,
// which returns the largest value seen.
func sampleHeap() (stop func() uint64) {
	var mu sync.Mutex
	var max uint64
	quit, finished := make(chan struct{}), make(chan struct{})
	sample := func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		mu.Lock()
		if m.HeapInuse > max {
			max = m.HeapInuse
		}
		mu.Unlock()
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				sample()
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() uint64 {
		close(quit)
		<-finished
		return max
	}
}

// cpuTime is the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fillChangelog appends n distinct entries to changelog partition 0, in the
// store's encoding (written through a store's prepared checkpoints), and
// returns the end offset and the records' key and value bytes.
func fillChangelog(b *testing.B, cl *kafka.Changelog, topic string, stages []string, n int) (end, bytes int64) {
	b.Helper()
	part, err := cl.Partition(topic, 0)
	if err != nil {
		b.Fatal(err)
	}
	src := store.NewMemory()
	ps, err := src.OpenPartition(topic, 0, stages)
	if err != nil {
		b.Fatal(err)
	}
	defer ps.Close()
	cs := ps.(chain.ChangelogStore)
	value := make([]byte, 60)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	exp := time.Now().Add(30 * 24 * time.Hour)
	const chunk = 50_000
	began := time.Now()
	for i := 0; i < n; i += chunk {
		for j := i; j < min(n, i+chunk); j++ {
			key := fmt.Appendf(nil, "c/user-%07d#%08d", j%700_000, j)
			if err := ps.Stage(0).Set(int64(j), key, value, exp); err != nil {
				b.Fatal(err)
			}
		}
		pc, err := cs.PrepareCheckpoint([]commit.Checkpoint{{Stage: stages[0], Next: int64(min(n, i+chunk))}}, time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		recs := pc.Records()
		for _, r := range recs {
			bytes += int64(len(r.Key) + len(r.Value))
		}
		if end, err = part.Append(context.Background(), recs); err != nil {
			b.Fatal(err)
		}
		if err := pc.Commit(end); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("changelog: %d entries, %.1f MB of keys and values, written in %s", n, float64(bytes)/1e6, time.Since(began).Round(time.Millisecond))
	return end, bytes
}
