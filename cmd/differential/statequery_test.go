package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/statequery"
	"github.com/differential-dev/differential/internal/workload"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/store"
)

// inputEvent is one input record as a state query test reads it.
type inputEvent struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	UserID  string `json:"user_id"`
}

// clickers returns, per user with clicks in the input, the offsets of
// those clicks by event id.
func clickers(t *testing.T, tp *topics) map[string]map[string]int64 {
	t.Helper()
	inputs, _ := tp.input(t)
	users := map[string]map[string]int64{}
	for _, recs := range inputs {
		for _, r := range recs {
			var e inputEvent
			if json.Unmarshal(r.Value, &e) != nil || e.Type != "click" || e.UserID == "" || string(r.Key) != e.UserID {
				continue
			}
			if users[e.UserID] == nil {
				users[e.UserID] = map[string]int64{}
			}
			users[e.UserID][e.EventID] = r.Offset
		}
	}
	require.NotEmpty(t, users)
	return users
}

// busiest is the user with the most clicks.
func busiest(users map[string]map[string]int64) string {
	best := ""
	for u, cs := range users {
		if best == "" || len(cs) > len(users[best]) || (len(cs) == len(users[best]) && u < best) {
			best = u
		}
	}
	return best
}

func queryState(t *testing.T, base, user, token string) (int, http.Header, statequery.Answer) {
	t.Helper()
	code, hdr, body := fetch(t, base+"/state/"+user, token)
	var a statequery.Answer
	if code == http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &a), string(body))
	}
	return code, hdr, a
}

// noRedirects is a client that returns a redirect instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestStateQuery: with every partition's end committed, GET /state/{key}
// answers the key's clicks from its partition (the producer's partition of
// the key) at the partition's end, and its velocity count; without the
// bearer token it is refused (401), while /metrics and /healthz stay open.
func TestStateQuery(t *testing.T) {
	tp := newTopics(t, 2)
	tp.produce(t, 2000, 12) // a workload whose latest clicks are in the look-back window at its end
	users := clickers(t, tp)
	user := busiest(users)
	_, ends := tp.input(t)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("q-token\n"), 0o600))
	addrs := make(chan string, 1)
	w := newWatcher()
	p := startCLI(t, hooks{chainOptions: w.member().options(), metricsListening: func(a string) { addrs <- a }},
		tp.runArgs("--http-addr", "127.0.0.1:0", "--http-token-file", token, "--velocity-window", "1h")...)
	base := "http://" + recv(t, addrs, "the HTTP server")
	recv(t, w.reach(ends), "every partition's end to be committed")

	code, hdr, _ := queryState(t, base, user, "")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, hdr.Values("WWW-Authenticate"), `Bearer realm="differential"`)
	code, _, _ = queryState(t, base, user, "wrong")
	require.Equal(t, http.StatusUnauthorized, code)
	for _, open := range []string{"/metrics", "/healthz"} {
		code, _, _ := fetch(t, base+open, "")
		require.Equal(t, http.StatusOK, code, open)
	}

	code, _, a := queryState(t, base, user, "q-token")
	require.Equal(t, http.StatusOK, code)
	part := workload.Partition([]byte(user), tp.partitions)
	require.Equal(t, user, a.Key)
	require.Equal(t, tp.in, a.Topic)
	require.Equal(t, part, a.Partition)
	require.Equal(t, ends[part], a.Offset, "the answer is at the partition's committed end")
	for _, s := range []string{"click", "velocity", "install"} {
		require.Equal(t, ends[part], a.Stages[s].Offset, s)
	}
	require.NotEmpty(t, a.Clicks, "%s: answer %+v", user, a)
	for _, c := range a.Clicks {
		off, ok := users[user][c.EventID]
		require.True(t, ok, "click %s is one of %s's", c.EventID, user)
		require.Equal(t, off, c.Offset)
	}
	require.NotNil(t, a.Velocity)
	require.Equal(t, "1h", a.Velocity.Window)
	require.Equal(t, exitOK, p.stop(t), tail(p.err.String()))

	// The answer is the stored state: the user's clicks in the window at
	// the click stage's watermark, as the state directory holds them.
	db, err := store.OpenPebble(tp.stateDir)
	require.NoError(t, err)
	defer db.Close()
	ents, err := db.Entries(tp.in, part)
	require.NoError(t, err)
	sn, err := attribution.SnapshotOf(ents)
	require.NoError(t, err)
	from := a.Stages["click"].Watermark.Add(-testRules().Lookback - testRules().Lateness)
	var stored []string
	for _, c := range sn.Clicks {
		if c.UserID == user && !c.Time.Before(from) {
			stored = append(stored, c.EventID)
		}
	}
	var answered []string
	for _, c := range a.Clicks {
		answered = append(answered, c.EventID)
	}
	require.ElementsMatch(t, stored, answered)
}

// holdingChangelog holds every changelog read (a restore) until release
// is closed; reading is closed at the first.
type holdingChangelog struct {
	chain.Changelog
	once      sync.Once
	reading   chan struct{}
	release   chan struct{}
	retention func() time.Duration
}

func (h *holdingChangelog) Partition(topic string, p int32) (chain.ChangelogPartition, error) {
	cp, err := h.Changelog.Partition(topic, p)
	if err != nil {
		return nil, err
	}
	return holdingPartition{cp, h}, nil
}

func (h *holdingChangelog) TombstoneRetention() time.Duration {
	if tr, ok := h.Changelog.(chain.TombstoneRetention); ok {
		return tr.TombstoneRetention()
	}
	return 0
}

type holdingPartition struct {
	chain.ChangelogPartition
	h *holdingChangelog
}

func (p holdingPartition) Read(ctx context.Context, from, to int64, fn func([]chain.ChangelogRecord) error) error {
	p.h.once.Do(func() { close(p.h.reading) })
	select {
	case <-p.h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.ChangelogPartition.Read(ctx, from, to, fn)
}

// TestStateQueryDuringRestore: a member that restores its partitions from
// the changelog (a new state directory) answers 503 with Retry-After while
// the restore runs, and, once it is done, the same answer as the member
// whose state it restored.
func TestStateQueryDuringRestore(t *testing.T) {
	tp := newTopics(t, 2)
	tp.produce(t, 2000, 12)
	user := busiest(clickers(t, tp))
	_, ends := tp.input(t)
	addrs := make(chan string, 1)
	w := newWatcher()
	first := startCLI(t, hooks{chainOptions: w.member().options(), metricsListening: func(a string) { addrs <- a }},
		tp.runArgs("--http-addr", "127.0.0.1:0")...)
	base := "http://" + recv(t, addrs, "the HTTP server")
	recv(t, w.reach(ends), "every partition's end to be committed")
	code, _, want := queryState(t, base, user, "")
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, want.Clicks)
	require.Equal(t, exitOK, first.stop(t), tail(first.err.String()))

	hold := &holdingChangelog{reading: make(chan struct{}), release: make(chan struct{})}
	started := newStartedObserver(tp.partitions)
	second := startCLI(t, hooks{
		chainOptions:     []chain.Option{chain.WithObserver(started)},
		metricsListening: func(a string) { addrs <- a },
		wrapChangelog: func(cl chain.Changelog) chain.Changelog {
			hold.Changelog = cl
			return hold
		},
	}, tp.runArgs("--http-addr", "127.0.0.1:0", "--state-dir", t.TempDir())...)
	base = "http://" + recv(t, addrs, "the second HTTP server")
	recv(t, hold.reading, "a restore to read the changelog")
	code, hdr, body := fetch(t, base+"/state/"+user, "")
	require.Equal(t, http.StatusServiceUnavailable, code, string(body))
	require.NotEmpty(t, hdr.Get("Retry-After"))
	require.Contains(t, string(body), "unavailable")
	close(hold.release)

	recv(t, started.all, "every partition's restore to finish and its stages to start")
	code, _, got := queryState(t, base, user, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, want, got, "the restored state answers as the state it was restored from")
	require.Equal(t, exitOK, second.stop(t), tail(second.err.String()))
}

// TestStateQueryRedirect: in a group of two members, each advertising its
// HTTP address through the group, a member answers a key of the other's
// partition with 307 to the other's /state/{key}, and the other answers it.
func TestStateQueryRedirect(t *testing.T) {
	for _, assignor := range []string{assignorSticky, assignorCooperative} {
		t.Run(assignor, func(t *testing.T) { testStateQueryRedirect(t, assignor) })
	}
}

func testStateQueryRedirect(t *testing.T, assignor string) {
	tp := newTopics(t, 4)
	tp.produce(t, 2000, 13)
	users := clickers(t, tp)
	addrA, addrB := make(chan string, 1), make(chan string, 1)
	changed := make(chan struct{}, 1)
	runA, runB := newRunningObserver(changed), newRunningObserver(changed)
	a := startCLI(t, hooks{chainOptions: []chain.Option{chain.WithObserver(runA)}, metricsListening: func(s string) { addrA <- s }},
		tp.runArgs("--http-addr", "127.0.0.1:0", "--state-dir", t.TempDir(), "--assignor", assignor)...)
	b := startCLI(t, hooks{chainOptions: []chain.Option{chain.WithObserver(runB)}, metricsListening: func(s string) { addrB <- s }},
		tp.runArgs("--http-addr", "127.0.0.1:0", "--state-dir", t.TempDir(), "--assignor", assignor)...)
	hostA, hostB := recv(t, addrA, "member A's HTTP server"), recv(t, addrB, "member B's HTTP server")

	// The group has settled once the members run disjoint, non-empty sets
	// of partitions that cover the input.
	var ownA, ownB map[int32]bool
	for {
		ownA, ownB = runA.running(), runB.running()
		if len(ownA) > 0 && len(ownB) > 0 && len(ownA)+len(ownB) == int(tp.partitions) && disjoint(ownA, ownB) {
			break
		}
		recv(t, changed, "the group to settle on two members")
	}
	t.Logf("A runs %v, B runs %v", ownA, ownB)

	for p := range tp.partitions {
		u := ""
		for c := range users {
			if workload.Partition([]byte(c), tp.partitions) == p && (u == "" || c < u) {
				u = c
			}
		}
		require.NotEmpty(t, u, "a user of partition %d", p)
		owner, other := hostA, hostB
		if ownB[p] {
			owner, other = hostB, hostA
		}
		resp, err := noRedirects.Get("http://" + other + "/state/" + u)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, "partition %d asked of the member that does not own it", p)
		require.Equal(t, "http://"+owner+"/state/"+u, resp.Header.Get("Location"))
		code, _, got := queryState(t, "http://"+owner, u, "")
		require.Equal(t, http.StatusOK, code, "partition %d asked of its owner", p)
		require.Equal(t, p, got.Partition)
		// A client that follows the redirect gets the owner's answer.
		code, _, viaOther := queryState(t, "http://"+other, u, "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, got.Key, viaOther.Key)
	}
	require.Equal(t, exitOK, b.stop(t), tail(b.err.String()))
	require.Equal(t, exitOK, a.stop(t), tail(a.err.String()))
}

// runningObserver tracks the partitions whose stages run on a member and
// signals changed at every change.
type runningObserver struct {
	startedObserver
	mu      sync.Mutex
	now     map[int32]bool
	changed chan<- struct{}
}

func newRunningObserver(changed chan<- struct{}) *runningObserver {
	return &runningObserver{now: map[int32]bool{}, changed: changed}
}

func (o *runningObserver) PartitionStarted(_ string, p int32, _ func() chain.PartitionStats) {
	o.set(p, true)
}
func (o *runningObserver) PartitionStopped(_ string, p int32) { o.set(p, false) }

func (o *runningObserver) set(p int32, on bool) {
	o.mu.Lock()
	if on {
		o.now[p] = true
	} else {
		delete(o.now, p)
	}
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

func (o *runningObserver) running() map[int32]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[int32]bool{}
	for p := range o.now {
		out[p] = true
	}
	return out
}

func disjoint(a, b map[int32]bool) bool {
	for p := range a {
		if b[p] {
			return false
		}
	}
	return true
}
