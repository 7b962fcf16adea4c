package chain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
)

func headers(m chain.Message) map[string]string {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[string(x.Key)] = string(x.Value)
	}
	return h
}

func weight(m chain.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestOversizedRecordIsDeadLetteredTruncated (I7): a record
// larger than a dead letter may be is dead-lettered with its value cut and
// headers giving the original size and hash; the partition goes on.
func TestOversizedRecordIsDeadLetteredTruncated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 64 << 10
		r := newRecorder()
		tt := chaintest.New(t, threeStages(r, true, 0, nil), testDecoder, chain.WithMaxDeadLetterBytes(limit))
		tt.SetMaxMessageBytes(limit + 1024)       // the producer's own limit, a little above
		big := bytes.Repeat([]byte("x"), 200<<10) // no separator: invalid
		tt.Start(0)
		tt.Feed(0,
			chain.Record{Key: []byte("u"), Value: big, Headers: []chain.Header{{Key: []byte("trace"), Value: []byte("t1")}}},
			chaintest.Rec("u", ev("click", 1), base))
		require.NoError(t, tt.Stop())
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, 1)
		m := dlq[0]
		require.LessOrEqual(t, weight(m), limit)
		h := headers(m)
		require.Equal(t, "value", h[chain.HeaderDLQTruncated])
		require.Equal(t, strconv.Itoa(len(big)), h[chain.HeaderDLQOriginalSize])
		require.Equal(t, sha(big), h[chain.HeaderDLQOriginalSHA256])
		require.Equal(t, "t1", h["trace"], "the original headers stay")
		require.Equal(t, "0", h[chain.HeaderDLQOffset])
		require.True(t, bytes.HasPrefix(big, m.Value), "the value is a prefix of the original")
		require.Greater(t, len(m.Value), limit/2)
		require.Equal(t, 1, r.callsOf("click")[1], "the partition went on")
		commits := tt.Commits(0)
		require.Equal(t, int64(2), commits[len(commits)-1].Offset)
	})
}

// TestDeadLetterRefusedForSizeIsSentMinimal: when Kafka refuses
// a dead letter for its size (the dead-letter topic's limit is below the
// chain's), the minimal dead letter is produced instead of failing the
// partition for ever.
func TestDeadLetterRefusedForSizeIsSentMinimal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRecorder()
		tt := chaintest.New(t, threeStages(r, true, 0, nil), testDecoder)
		tt.SetMaxMessageBytes(16 << 10)
		big := bytes.Repeat([]byte("y"), 100<<10)
		tt.Start(0)
		tt.Feed(0, chain.Record{Key: []byte("u"), Value: big}, chaintest.Rec("u", ev("click", 1), base))
		require.NoError(t, tt.Stop())
		dlq := tt.Outputs("dlq")
		require.Len(t, dlq, 1)
		require.LessOrEqual(t, weight(dlq[0]), chain.MinDeadLetterBytes)
		h := headers(dlq[0])
		require.Equal(t, strconv.Itoa(len(big)), h[chain.HeaderDLQOriginalSize])
		require.Equal(t, sha(big), h[chain.HeaderDLQOriginalSHA256])
		require.NotEmpty(t, h[chain.HeaderDLQReason])
		require.Equal(t, 1, r.callsOf("click")[1])
		commits := tt.Commits(0)
		require.Equal(t, int64(2), commits[len(commits)-1].Offset)
	})
}

// TestDeadLetterShapes: DeadLetter keeps a record that fits whole, and cuts
// value, then the original headers, then key and reason, to fit the limit.
func TestDeadLetterShapes(t *testing.T) {
	rec := chain.Record{Topic: "in", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"),
		Headers: []chain.Header{{Key: []byte("h"), Value: []byte("1")}}}
	m := chain.DeadLetter("dlq", "click", &rec, errors.New("bad"), chain.DefaultMaxDeadLetterBytes)
	h := headers(m)
	require.Equal(t, "dlq", m.Topic)
	require.Equal(t, "v", string(m.Value))
	require.Equal(t, map[string]string{"h": "1", chain.HeaderDLQReason: "bad", chain.HeaderDLQTopic: "in",
		chain.HeaderDLQPartition: "3", chain.HeaderDLQOffset: "42", chain.HeaderDLQStage: "click"}, h)

	huge := bytes.Repeat([]byte("z"), 50<<10)
	rec = chain.Record{Topic: "in", Offset: 7, Key: huge, Value: huge,
		Headers: []chain.Header{{Key: []byte("big"), Value: huge}}}
	m = chain.DeadLetter("dlq", "click", &rec, errors.New(string(huge)), chain.MinDeadLetterBytes)
	require.LessOrEqual(t, weight(m), chain.MinDeadLetterBytes)
	h = headers(m)
	require.Equal(t, "value,headers,reason,key", h[chain.HeaderDLQTruncated])
	require.NotContains(t, h, "big")
	require.Equal(t, "7", h[chain.HeaderDLQOffset])
	require.Equal(t, strconv.Itoa(len(huge)), h[chain.HeaderDLQOriginalSize])
	require.Equal(t, sha(huge), h[chain.HeaderDLQOriginalSHA256])
	require.Len(t, m.Key, 1<<10)
	require.Len(t, h[chain.HeaderDLQReason], 1<<10)
	require.Equal(t, huge[:len(m.Value)], m.Value)
}
