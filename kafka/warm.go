package kafka

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"
)

// A member with standby replicas keeps warm copies of partitions it does
// not own, and advertises them beside its address: one more "topic" with
// no partitions in the sticky user data, named warmTopicPrefix, the topic,
// '=' and the partitions as ascending ranges ("differential/warm=in=0-3,7").
// A topic name has no '=', and a sticky leader of any build reads the
// entry, as it does the address's, as owning nothing.
const warmTopicPrefix = "differential/warm="

const (
	// maxWarmEntry bounds the entry's name, an int16-length string: a
	// longer list is cut to its lowest partitions.
	maxWarmEntry = 30000
	// maxWarmDecoded bounds what one entry decodes to, so that a corrupt
	// range cannot exhaust the leader's memory.
	maxWarmDecoded = 1 << 20
)

// PreferWarm returns strategy with the partitions of topic that warm
// returns (called at each subscription; nil for none) advertised in every
// subscription of the member, and with a Plan that hands a partition which
// must move to a member holding it warm where a swap between two moved
// partitions allows (see preferWarm). Members advertising nothing hold
// nothing warm. On a strategy from Advertise it returns a copy advertising
// both; an empty topic or a nil warm returns strategy as it is.
func PreferWarm(strategy sarama.BalanceStrategy, topic string, warm func() []int32) sarama.BalanceStrategy {
	if strategy == nil || topic == "" || warm == nil {
		return strategy
	}
	a, ok := strategy.(*advertising)
	if ok {
		a = a.clone()
	} else {
		a = &advertising{BalanceStrategy: strategy}
	}
	a.warmTopic, a.warm = topic, warm
	return a
}

// Plan is the wrapped strategy's plan improved by preferWarm. Whichever
// member leads reads every member's warm entries, so the plan does not
// depend on the leader having standbys itself.
func (a *advertising) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	plan, err := a.BalanceStrategy.Plan(members, topics)
	if err == nil {
		preferWarm(plan, members)
	}
	return plan, err
}

// preferWarm swaps, within a topic, a partition p the plan moves to a
// member m not warm for it with a partition q it moves to a member w warm
// for p and not for q (preferring a q that m is warm for); "moved" means
// not owned by the member in its subscription (owned partitions for the
// cooperative protocol, the sticky user data for the eager one). Each swap
// places one more moved partition warm, so it ends; counts stay the inner
// plan's and no partition leaves a member that owned it. Under the
// cooperative protocol a swap is safe because a partition the plan gives
// to a member that did not own it is owned by no member: the cooperative
// assignor withholds a partition until its owner has revoked it, so p and
// q are both free and neither member takes one another still holds.
func preferWarm(plan sarama.BalanceStrategyPlan, members map[string]sarama.ConsumerGroupMemberMetadata) {
	ids := slices.Sorted(maps.Keys(plan))
	var topics []string
	for _, ts := range plan {
		for t := range ts {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	for _, t := range slices.Compact(topics) {
		warm := map[string]map[int32]bool{}
		moved := map[string][]int32{}
		for _, id := range ids {
			meta, ok := members[id]
			if !ok || !slices.Contains(meta.Topics, t) {
				continue
			}
			for _, p := range warmPartitions(meta.UserData, t) {
				if warm[id] == nil {
					warm[id] = map[int32]bool{}
				}
				warm[id][p] = true
			}
			owned := ownedBefore(meta, t)
			for _, p := range plan[id][t] {
				if !slices.Contains(owned, p) {
					moved[id] = append(moved[id], p)
				}
			}
			slices.Sort(moved[id])
		}
		if len(warm) == 0 {
			continue
		}
		for swapWarm(plan, t, ids, warm, moved) {
		}
	}
}

// swapWarm makes the first swap preferWarm allows (members, then
// partitions, in ascending order) and says whether there was one.
func swapWarm(plan sarama.BalanceStrategyPlan, t string, ids []string, warm map[string]map[int32]bool, moved map[string][]int32) bool {
	for _, m := range ids {
		for i, p := range moved[m] {
			if warm[m][p] {
				continue
			}
			for _, w := range ids {
				if w == m || !warm[w][p] {
					continue
				}
				j := -1
				for k, q := range moved[w] {
					if !warm[w][q] && (j < 0 || warm[m][q] && !warm[m][moved[w][j]]) {
						j = k
					}
				}
				if j < 0 {
					continue
				}
				q := moved[w][j]
				moved[m][i], moved[w][j] = q, p
				slices.Sort(moved[m])
				slices.Sort(moved[w])
				plan[m][t][slices.Index(plan[m][t], p)] = q
				plan[w][t][slices.Index(plan[w][t], q)] = p
				return true
			}
		}
	}
	return false
}

// ownedBefore is what meta says its member owned of topic t: its owned
// partitions (the cooperative protocol's record) and the sticky user data
// (the eager one's).
func ownedBefore(meta sarama.ConsumerGroupMemberMetadata, t string) []int32 {
	var owned []int32
	for _, o := range meta.OwnedPartitions {
		if o != nil && o.Topic == t {
			owned = append(owned, o.Partitions...)
		}
	}
	if d, err := decodeStickyData(meta.UserData); err == nil {
		owned = append(owned, d.Topics[t]...)
	}
	return owned
}

// warmEntry is the entry name advertising partitions ps of topic, "" for
// none.
func warmEntry(topic string, ps []int32) string {
	ps = slices.Clone(ps)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	i, _ := slices.BinarySearch(ps, 0)
	ps = ps[i:]
	b := []byte(warmTopicPrefix + topic + "=")
	n := len(b)
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		tok := strconv.AppendInt(nil, int64(ps[i]), 10)
		if j > i {
			tok = strconv.AppendInt(append(tok, '-'), int64(ps[j]), 10)
		}
		if len(b) > n {
			tok = append([]byte{','}, tok...)
		}
		if len(b)+len(tok) > maxWarmEntry {
			break
		}
		b = append(b, tok...)
		i = j + 1
	}
	if len(b) == n {
		return ""
	}
	return string(b)
}

// warmPartitions is what a member's subscription user data advertises
// warm of topic, ascending; nil for none or for user data that is not the
// sticky strategy's. A malformed range is skipped.
func warmPartitions(userData []byte, topic string) []int32 {
	d, err := decodeStickyData(userData)
	if err != nil {
		return nil
	}
	var ps []int32
	for e := range d.Topics {
		rest, ok := strings.CutPrefix(e, warmTopicPrefix)
		if !ok {
			continue
		}
		if t, list, ok := strings.Cut(rest, "="); ok && t == topic {
			for tok := range strings.SplitSeq(list, ",") {
				lo, hi, isRange := strings.Cut(tok, "-")
				if !isRange {
					hi = lo
				}
				l, err1 := strconv.ParseInt(lo, 10, 32)
				h, err2 := strconv.ParseInt(hi, 10, 32)
				if err1 != nil || err2 != nil || l < 0 || h < l || len(ps)+int(h-l) >= maxWarmDecoded {
					continue
				}
				for p := l; p <= h; p++ {
					ps = append(ps, int32(p))
				}
			}
		}
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}
