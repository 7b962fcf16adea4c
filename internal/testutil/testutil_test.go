package testutil_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/internal/testutil"
)

func TestDecoder(t *testing.T) {
	d, err := testutil.Decoder.Decode(&chain.Record{Value: []byte("install|90")})
	require.NoError(t, err)
	require.Equal(t, "install", d.Type)
	require.Equal(t, testutil.Base.Add(90*time.Second), d.Time)
	_, err = testutil.Decoder.Decode(&chain.Record{Value: []byte("bad")})
	require.ErrorContains(t, err, "no separator")
	_, err = testutil.Decoder.Decode(&chain.Record{Value: []byte("click|x")})
	require.ErrorContains(t, err, "bad time")
}

func TestSyncBufferConcurrentWriters(t *testing.T) {
	var b testutil.SyncBuffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "%d\n", i)
			}
		})
	}
	wg.Wait()
	require.Len(t, b.String(), 8*100*2)
}
