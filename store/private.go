package store

import (
	"strings"
	"time"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/commit"
)

// privateBound is one stage's Private prefix and, during a checkpoint, the
// eviction bound of the entries under it.
type privateBound struct {
	prefix string
	stage  int
	ev     int64
}

// EvictPrivate implements chain.PrivateEvicter: from the next checkpoint
// on, a write under prefixes[i] whose expiry is at or before stage i's
// checkpointed watermark is not persisted (a persisted entry of the key is
// deleted), as the slowest stage's watermark decides for the other keys.
// Entries under a prefix that an earlier checkpoint persisted are evicted
// with the others, when the slowest stage's watermark passes their expiry:
// the gain is in the writes a backlog would persist and delete again, and
// the expiry index stays one order for every key.
func (p *partitionStore) EvictPrivate(prefixes [][]string) {
	p.ckpt.Lock()
	defer p.ckpt.Unlock()
	p.ckpt.private = p.ckpt.private[:0]
	for i, ps := range prefixes {
		if i >= len(p.stages) {
			break
		}
		for _, pre := range ps {
			p.ckpt.private = append(p.ckpt.private, privateBound{prefix: pre, stage: i})
		}
	}
}

// setPrivateBounds sets each private prefix's bound for the checkpoint of
// cps whose bound for every other key is ev: its stage's own, never below
// ev. Called with ckpt held.
func (p *partitionStore) setPrivateBounds(cps []commit.Checkpoint, ev int64) {
	for i := range p.ckpt.private {
		pb := &p.ckpt.private[i]
		pb.ev = ev
		if wm := cps[pb.stage].Watermark; wm != 0 {
			pb.ev = max(ev, expiryNanos(chain.EvictBefore(time.Unix(0, wm))))
		}
	}
}

// evictionBound is the eviction bound of key in the checkpoint being
// prepared (setPrivateBounds): its owner's if it is private, else ev.
func (p *partitionStore) evictionBound(key string, ev int64) int64 {
	for _, pb := range p.ckpt.private {
		if strings.HasPrefix(key, pb.prefix) {
			return pb.ev
		}
	}
	return ev
}
