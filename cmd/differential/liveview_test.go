package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/liveview"
	"github.com/differential-dev/differential/internal/testutil"
)

// startedObserver closes all once n partitions have started their stages.
type startedObserver struct {
	mu   sync.Mutex
	n    int
	seen map[int32]bool
	all  chan struct{}
}

func newStartedObserver(n int32) *startedObserver {
	return &startedObserver{n: int(n), seen: map[int32]bool{}, all: make(chan struct{})}
}

func (o *startedObserver) Begin(chain.BeginInfo)                         {}
func (o *startedObserver) Advanced(string, int32, int, int64, time.Time) {}
func (o *startedObserver) Committed(string, int32, int64, string)        {}
func (o *startedObserver) PartitionStopped(string, int32)                {}
func (o *startedObserver) PartitionStarted(_ string, p int32, _ func() chain.PartitionStats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen[p] {
		return
	}
	o.seen[p] = true
	if len(o.seen) == o.n {
		close(o.all)
	}
}

// liveRun is `run` with its HTTP server, the purchase stage blocked on
// one partition.
type liveRun struct {
	base    string
	blocked int32
	release func()
	ended   <-chan struct{} // every partition's end committed
	ends    map[int32]int64
	p       *proc
}

func startLiveRun(t *testing.T, tp *topics, extra ...string) *liveRun {
	t.Helper()
	_, ends := tp.input(t)
	addrs := make(chan string, 1)
	pz := newPauser("purchase", 50)
	w := newWatcher()
	started := newStartedObserver(tp.partitions)
	p := startCLI(t, hooks{
		chainOptions:     append(w.member().options(), chain.WithObserver(started)),
		wrapStages:       pz.wrap,
		metricsListening: func(a string) { addrs <- a },
	}, tp.runArgs(append([]string{"--http-addr", "127.0.0.1:0"}, extra...)...)...)
	r := &liveRun{base: "http://" + recv(t, addrs, "the HTTP server"), blocked: recv(t, pz.blocked, "the purchase stage to block"),
		release: func() { close(pz.release) }, ended: w.reach(ends), ends: ends, p: p}
	recv(t, started.all, "every partition's stages to start")
	return r
}

// fetch GETs url with the bearer token (none when "").
func fetch(t *testing.T, url, token string) (int, http.Header, []byte) {
	t.Helper()
	return testutil.Get(t, url, token)
}

// positions maps partition and stage to a stage's position.
type positions map[string]int64

func key(partition int32, stage string) string { return fmt.Sprintf("%d/%s", partition, stage) }

// TestLiveViewAPI runs `run --http-addr --http-token-file` with the
// purchase stage blocked on one partition: the live view and its JSON
// refuse a request without the token (401) and answer one with it, while
// /metrics and /healthz need none; the JSON has every partition and stage;
// once the stage is released and every partition's end is committed, a
// second read has every stage at its partition's end — the blocked stage's
// position has advanced — and the exactly-once cycles that committed.
func TestLiveViewAPI(t *testing.T) {
	tp := newTopics(t, 3)
	tp.produce(t, 3000, 7)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("let-me-in\n"), 0o600))
	r := startLiveRun(t, tp, "--http-token-file", token)
	api := r.base + liveview.APIPath

	for _, url := range []string{r.base + "/", api} {
		code, hdr, body := fetch(t, url, "")
		require.Equal(t, http.StatusUnauthorized, code, url)
		require.Contains(t, hdr.Values("WWW-Authenticate"), `Bearer realm="differential"`)
		require.NotContains(t, string(body), tp.in, "nothing of the engine without the token")
		code, _, _ = fetch(t, url, "let-me-i")
		require.Equal(t, http.StatusUnauthorized, code, url)
	}
	code, _, body := fetch(t, r.base+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "differential_stage_position")
	code, _, body = fetch(t, r.base+"/healthz", "")
	require.Equal(t, http.StatusOK, code, string(body))
	code, hdr, body := fetch(t, r.base+"/", "let-me-in")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/html; charset=utf-8", hdr.Get("Content-Type"))
	require.Contains(t, string(body), "Differential")

	read := func() (liveview.Snapshot, positions) {
		code, hdr, body := fetch(t, api, "let-me-in")
		require.Equal(t, http.StatusOK, code, string(body))
		require.Equal(t, "application/json", hdr.Get("Content-Type"))
		var s liveview.Snapshot
		require.NoError(t, json.Unmarshal(body, &s))
		require.Equal(t, []string{"click", "install", "purchase"}, s.Stages)
		require.Len(t, s.Partitions, int(tp.partitions), string(body))
		pos := positions{}
		for i, p := range s.Partitions {
			require.Equal(t, tp.in, p.Topic)
			require.Equal(t, int32(i), p.Partition, "sorted by partition")
			require.Len(t, p.Stages, 3, "partition %d's stages", i)
			for j, st := range p.Stages {
				require.Equal(t, s.Stages[j], st.Name)
				pos[key(p.Partition, st.Name)] = st.Position
			}
		}
		return s, pos
	}
	first, before := read()
	require.Equal(t, "ok", first.Health.State)
	require.Less(t, before[key(r.blocked, "purchase")], r.ends[r.blocked], "the blocked stage is not at the end")

	r.release()
	recv(t, r.ended, "the group to commit every partition's end")
	last, after := read()
	for k, p := range before {
		require.GreaterOrEqual(t, after[k], p, k)
	}
	require.Greater(t, after[key(r.blocked, "purchase")], before[key(r.blocked, "purchase")], "the released stage advanced")
	for _, p := range last.Partitions {
		for _, st := range p.Stages {
			require.Equal(t, r.ends[p.Partition], st.Position, "partition %d stage %s at the end", p.Partition, st.Name)
			require.Zero(t, st.Lag)
		}
		require.Equal(t, r.ends[p.Partition], p.Committed)
	}
	require.NotNil(t, last.ExactlyOnce)
	require.Positive(t, last.ExactlyOnce.Committed)
	require.Equal(t, exitOK, r.p.stop(t), tail(r.p.err.String()))
}

// browserEnv names the browser of TestLiveViewInBrowser (CI sets it, from
// scripts/browser.sh).
const browserEnv = "DIFFERENTIAL_TEST_BROWSER"

// TestLiveViewInBrowser opens the live view of `run` in a headless
// Chromium twice, with the purchase stage blocked on one partition and
// after every partition's end is committed: the page's script rendered
// every partition with its three stages both times, and the blocked
// stage's position advanced between the two.
func TestLiveViewInBrowser(t *testing.T) {
	browser := os.Getenv(browserEnv)
	if browser == "" {
		t.Skipf("%s names no browser (bash scripts/browser.sh install; %s=/usr/bin/chromium)", browserEnv, browserEnv)
	}
	_, err := os.Stat(browser)
	require.NoError(t, err, "%s=%s", browserEnv, browser)

	tp := newTopics(t, 3)
	tp.produce(t, 3000, 8)
	r := startLiveRun(t, tp)

	first := renderedPositions(t, dumpDOM(t, browser, r.base+"/"), tp)
	require.Less(t, first[key(r.blocked, "purchase")], r.ends[r.blocked])
	r.release()
	recv(t, r.ended, "the group to commit every partition's end")
	second := renderedPositions(t, dumpDOM(t, browser, r.base+"/"), tp)
	require.Greater(t, second[key(r.blocked, "purchase")], first[key(r.blocked, "purchase")], "the released stage advanced on the page")
	for part, end := range r.ends {
		for _, st := range []string{"click", "install", "purchase"} {
			require.Equal(t, end, second[key(part, st)], "partition %d stage %s on the page", part, st)
		}
	}
	require.Equal(t, exitOK, r.p.stop(t), tail(r.p.err.String()))
}

// dumpDOM loads url in a headless browser and returns the DOM after the
// page's script ran: --virtual-time-budget lets the page's timers and
// fetches run (virtual time waits for the network) before the dump.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=3000", "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s --dump-dom: %s", browser, stderr.String())
	return string(out)
}

var (
	articleRe = regexp.MustCompile(`<article class="part" data-partition="([^"]+)">`)
	rowRe     = regexp.MustCompile(`<tr data-stage="([a-z]+)" data-position="(-?\d+)"`)
)

// renderedPositions reads the stage rows the page's script rendered, and
// checks that every partition is there with its three stages.
func renderedPositions(t *testing.T, dom string, tp *topics) positions {
	t.Helper()
	require.Regexp(t, `data-renders="[1-9]`, dom, "the script rendered a snapshot")
	pos := positions{}
	locs := articleRe.FindAllStringSubmatchIndex(dom, -1)
	require.Len(t, locs, int(tp.partitions), "one card per partition in:\n%s", dom)
	for i, loc := range locs {
		name := dom[loc[2]:loc[3]]
		topic, part, ok := strings.Cut(name, "/")
		require.True(t, ok, name)
		require.Equal(t, tp.in, topic)
		n, err := strconv.ParseInt(part, 10, 32)
		require.NoError(t, err)
		end := len(dom)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		rows := rowRe.FindAllStringSubmatch(dom[loc[1]:end], -1)
		require.Len(t, rows, 3, "partition %s's stages", name)
		for j, st := range []string{"click", "install", "purchase"} {
			require.Equal(t, st, rows[j][1])
			v, err := strconv.ParseInt(rows[j][2], 10, 64)
			require.NoError(t, err)
			pos[key(int32(n), st)] = v
		}
	}
	return pos
}

// TestDemoServesLiveView: `demo --http-addr` serves the live view while
// the demo runs — with the purchase stage blocked, its JSON has every
// partition's three stages and the exactly-once state — and stops serving
// when the demo ends.
func TestDemoServesLiveView(t *testing.T) {
	addrs := make(chan string, 1)
	pz := newPauser("purchase", 20)
	started := newStartedObserver(2)
	p := startCLI(t, hooks{
		chainOptions:     []chain.Option{chain.WithObserver(started)},
		wrapStages:       pz.wrap,
		metricsListening: func(a string) { addrs <- a },
	}, "demo", "--records", "3000", "--partitions", "2", "--http-addr", "127.0.0.1:0")
	base := "http://" + recv(t, addrs, "the demo's HTTP server")
	recv(t, pz.blocked, "the purchase stage to block")
	recv(t, started.all, "every partition's stages to start")

	code, _, body := fetch(t, base+liveview.APIPath, "")
	require.Equal(t, http.StatusOK, code, string(body))
	var s liveview.Snapshot
	require.NoError(t, json.Unmarshal(body, &s))
	require.Len(t, s.Partitions, 2)
	for _, part := range s.Partitions {
		require.Len(t, part.Stages, 3)
	}
	require.NotNil(t, s.ExactlyOnce, "the demo runs exactly-once by default")
	code, _, _ = fetch(t, base+"/", "")
	require.Equal(t, http.StatusOK, code)

	close(pz.release)
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the demo did not end; stderr:\n%s", tail(p.err.String()))
	}
	require.Equal(t, exitOK, p.code, tail(p.err.String()))
	require.Contains(t, p.err.String(), "live view on "+base+"/ while the demo runs")
	require.Contains(t, p.out.String(), "verification    OK")
	_, err := http.Get(base + liveview.APIPath)
	require.Error(t, err, "the server stopped with the demo")
}
