package testutil

import (
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Refuse makes the fake broker answer requests of key with the response
// refuse builds for each — a refusal a real broker gives, such as an error
// code — for the first n of them (n < 0: all). A request refuse returns nil
// for, and every request once n were refused, is served as usual. It
// returns the count of requests refused so far.
func Refuse(fake *kfake.Cluster, key kmsg.Key, n int, refuse func(kmsg.Request) kmsg.Response) func() int {
	var refused atomic.Int64
	fake.ControlKey(int16(key), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		if n >= 0 && refused.Load() == int64(n) {
			return nil, nil, false
		}
		resp := refuse(kr)
		if resp == nil {
			return nil, nil, false
		}
		fake.KeepControl()
		refused.Add(1)
		return resp, nil, true
	})
	return func() int { return int(refused.Load()) }
}
