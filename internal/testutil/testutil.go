// Package testutil holds the helpers that tests of several packages share:
// a buffer for concurrent writers, the decoder of the engine's test
// records, a bounded receive, an HTTP GET with a bearer token and refusals
// forced on the embedded broker. Only test files import it
// (cmd/differential's TestBinaryLinksNoTestCode keeps it out of the binary).
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/differential-dev/differential/chain"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers (loggers,
// progress lines, a child process's output).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Base is the event time of second 0 of a test record.
var Base = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// Decoder decodes the test records whose values are "type|seconds": the
// event type, and the event time that many seconds after Base. Any other
// value fails to decode (a dead letter).
var Decoder = chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
	typ, secs, ok := strings.Cut(string(r.Value), "|")
	if !ok {
		return chain.Decoded{}, errors.New("no separator")
	}
	n, err := strconv.Atoi(secs)
	if err != nil {
		return chain.Decoded{}, fmt.Errorf("bad time: %w", err)
	}
	return chain.Decoded{Type: typ, Time: Base.Add(time.Duration(n) * time.Second)}, nil
})
