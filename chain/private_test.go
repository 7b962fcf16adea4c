package chain_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/chain/chaintest"
	"github.com/differential-dev/differential/store"
)

func TestPrivatePrefixesMustNotOverlap(t *testing.T) {
	noop := chain.ProcessorFunc(func(context.Context, *chain.Context, *chain.Event) error { return nil })
	dec := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) { return chain.Decoded{}, nil })
	for _, tc := range []struct {
		name string
		a, b []string
		ok   bool
	}{
		{"disjoint", []string{"a/"}, []string{"b/"}, true},
		{"one stage twice", []string{"a/", "a/x"}, nil, true},
		{"nested", []string{"a/"}, []string{"a/x/"}, false},
		{"equal", []string{"a/"}, []string{"a/"}, false},
		{"empty", []string{""}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := chain.New([]chain.Stage{
				{Name: "one", Processor: noop, Private: tc.a},
				{Name: "two", Processor: noop, Private: tc.b},
			}, dec)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// A stage that reads, writes or scans another stage's private keys stops
// its partition with ErrPrivateKey; its own and shared keys work.
func TestPrivateKeysOfAnotherStageAreRefused(t *testing.T) {
	dec := chain.DecoderFunc(func(r *chain.Record) (chain.Decoded, error) {
		typ, _, _ := strings.Cut(string(r.Value), " ")
		return chain.Decoded{Type: typ, Time: r.Timestamp}, nil
	})
	lead := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
		if err := pc.State().Set([]byte("own/"+string(e.Key)), []byte("v"), time.Time{}); err != nil {
			return err
		}
		return pc.State().Set([]byte("shared/"+string(e.Key)), []byte("v"), time.Time{})
	})
	at := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		access func(st chain.State) error
		ok     bool
	}{
		{"shared get", func(st chain.State) error { _, _, err := st.Get([]byte("shared/u")); return err }, true},
		{"own set", func(st chain.State) error { return st.Set([]byte("mine/u"), nil, time.Time{}) }, true},
		{"scan beside", func(st chain.State) error {
			return st.Scan([]byte("other"), []byte("own/"), func(k, v []byte) bool { return true })
		}, true},
		{"get", func(st chain.State) error { _, _, err := st.Get([]byte("own/u")); return err }, false},
		{"set", func(st chain.State) error { return st.Set([]byte("own/u"), nil, time.Time{}) }, false},
		{"delete", func(st chain.State) error { return st.Delete([]byte("own/x")) }, false},
		{"scan over", func(st chain.State) error {
			return st.Scan([]byte("o"), []byte("p"), func(k, v []byte) bool { return true })
		}, false},
		{"reverse scan to the end", func(st chain.State) error {
			return st.ScanReverse([]byte("own/zzz"), nil, func(k, v []byte) bool { return true })
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ran atomic.Bool
				follow := chain.ProcessorFunc(func(ctx context.Context, pc *chain.Context, e *chain.Event) error {
					ran.Store(true)
					return tc.access(pc.State())
				})
				stages := []chain.Stage{
					{Name: "click", Filter: func(e *chain.Event) bool { return e.Type == "click" }, Processor: lead, Private: []string{"own/"}},
					{Name: "install", Filter: func(e *chain.Event) bool { return e.Type == "install" }, Processor: follow, Private: []string{"mine/"}},
				}
				tt := chaintest.New(t, stages, dec, chain.WithStore(store.NewMemory()))
				tt.Start(0)
				tt.Append(0, chaintest.Rec("u", "click c", at), chaintest.Rec("u", "install i", at.Add(time.Minute)))
				time.Sleep(time.Minute) // fake time: the install's gate releases it as idle
				synctest.Wait()
				require.True(t, ran.Load(), "the install was processed")
				err := tt.Stop()
				if tc.ok {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, chain.ErrPrivateKey)
				}
			})
		})
	}
}
