package statequery_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/internal/statequery"
	"github.com/differential-dev/differential/processors/attribution"
)

type emptySnap struct{ closed *int }

func (emptySnap) Get([]byte) ([]byte, bool, error)                  { return nil, false, nil }
func (emptySnap) Scan([]byte, []byte, func(k, v []byte) bool) error { return nil }
func (s emptySnap) Close() error                                    { *s.closed++; return nil }
func (emptySnap) Checkpoint(st string) (commit.Checkpoint, bool, error) {
	return commit.Checkpoint{Stage: st, Next: map[string]int64{"click": 12, "install": 9, "purchase": 7}[st]}, true, nil
}

func TestHandler(t *testing.T) {
	const n = 4
	key := "user-1"
	p := statequery.Partition([]byte(key), n)
	running := chain.PartitionStats{Topic: "in", Partition: p, Stages: []chain.StageStats{{Name: "click"}}}
	var stats []chain.PartitionStats
	closed := 0
	owners := map[int32]string{}
	h := statequery.Handler(statequery.Config{
		Topic: "in", Partitions: func() (int32, error) { return n, nil },
		Stats: func() []chain.PartitionStats { return stats },
		Open:  func(int32) (statequery.Snapshot, error) { return emptySnap{&closed}, nil },
		Rules: attribution.DefaultConfig(), Self: "me:1", RetryAfter: 3 * time.Second,
		Owners: func(context.Context) (map[int32]string, error) { return owners, nil },
	})
	mux := http.NewServeMux()
	mux.Handle("GET "+statequery.Path, h)
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/state/"+key, nil))
		return rec
	}

	stats = []chain.PartitionStats{running}
	rec := get()
	if rec.Code != http.StatusOK {
		t.Fatalf("running: %d %s", rec.Code, rec.Body)
	}
	var a statequery.Answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if a.Key != key || a.Partition != p || a.Offset != 9 || a.Stages["click"].Offset != 12 || closed != 1 {
		t.Fatalf("answer %+v (snapshots closed %d), want partition %d at offset 9", a, closed, p)
	}

	restoring := running
	restoring.Stages = nil
	restoring.Restore = chain.RestoreStats{Restoring: true, Phase: "restoring", From: 0, To: 10, Position: 4}
	stats = []chain.PartitionStats{restoring}
	if rec := get(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "3" {
		t.Fatalf("restoring: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}

	stats = nil // another member's partition
	if rec := get(); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("no owner: %d", rec.Code)
	}
	owners[p] = "other:9100"
	rec = get()
	if rec.Code != http.StatusTemporaryRedirect || rec.Header().Get("Location") != "http://other:9100/state/"+key {
		t.Fatalf("owned elsewhere: %d Location %q", rec.Code, rec.Header().Get("Location"))
	}
	owners[p] = "me:1"
	if rec := get(); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("owned here, not running yet: %d", rec.Code)
	}
}

// TestPartitionIsSaramas: Partition places keys as sarama's default
// (hash) partitioner, the input producer's.
func TestPartitionIsSaramas(t *testing.T) {
	hp := sarama.NewHashPartitioner("in")
	for _, n := range []int32{1, 3, 8, 1000} {
		for _, k := range []string{"", "u1", "user-42", "00000000-0000-0000-0000-000000000000", "ü"} {
			want, err := hp.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(k)}, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := statequery.Partition([]byte(k), n); got != want {
				t.Errorf("Partition(%q, %d) = %d, sarama's %d", k, n, got, want)
			}
		}
	}
}
