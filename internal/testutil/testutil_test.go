package testutil_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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

func TestRecvReturnsTheValue(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	require.Equal(t, 7, testutil.Recv(t, ch, time.Second, "the value"))
}

func TestGetSendsTheToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Auth", r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, r.URL.Path)
	}))
	defer srv.Close()
	code, h, body := testutil.Get(t, srv.URL+"/p", "tok")
	require.Equal(t, http.StatusTeapot, code)
	require.Equal(t, "Bearer tok", h.Get("X-Auth"))
	require.Equal(t, "/p", string(body))
	_, h, _ = testutil.Get(t, srv.URL, "")
	require.Empty(t, h.Get("X-Auth"), "no token, no header")
}
