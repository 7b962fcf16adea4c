package kafka

import (
	"maps"
	"slices"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
)

var innerStrategies = []func() sarama.BalanceStrategy{sarama.NewBalanceStrategySticky, sarama.NewBalanceStrategyCooperativeSticky}

func constWarm(ps ...int32) func() []int32 { return func() []int32 { return ps } }

// TestWarmEncoding: the warm entry round-trips as ascending ranges, a list
// too long for one entry is cut to its lowest partitions, and malformed
// ranges are skipped.
func TestWarmEncoding(t *testing.T) {
	require.Empty(t, warmEntry("in", nil))
	require.Empty(t, warmEntry("in", []int32{-1}))
	e := warmEntry("in", []int32{12, 3, 1, 2, 2, 0, 7, 9, 10, 11, -1})
	require.Equal(t, "differential/warm=in=0-3,7,9-12", e)

	a := PreferWarm(sarama.NewBalanceStrategySticky(), "in", constWarm(12, 3, 1, 2, 0, 7, 9, 10, 11)).(*advertising)
	ud, err := a.SubscriptionUserData([]string{"in"})
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2, 3, 7, 9, 10, 11, 12}, warmPartitions(ud, "in"))
	require.Nil(t, warmPartitions(ud, "other"))
	require.Empty(t, advertisedAddr(ud))
	require.Nil(t, warmPartitions(nil, "in"))
	require.Nil(t, warmPartitions([]byte{1, 2}, "in"))

	none, err := PreferWarm(sarama.NewBalanceStrategySticky(), "in", constWarm()).(*advertising).SubscriptionUserData(nil)
	require.NoError(t, err)
	require.Nil(t, warmPartitions(none, "in"))

	var long []int32
	for p := int32(0); p < 20000; p += 2 {
		long = append(long, p)
	}
	e = warmEntry("in", long)
	require.LessOrEqual(t, len(e), maxWarmEntry)
	ud = stickyData{Topics: map[string][]int32{e: nil}, Generation: -1}.encode()
	got := warmPartitions(ud, "in")
	require.NotEmpty(t, got)
	require.Less(t, len(got), len(long))
	require.Equal(t, long[:len(got)], got)

	ud = stickyData{Topics: map[string][]int32{warmTopicPrefix + "in=1-x,5,9-3,-2,7-8,": nil}, Generation: -1}.encode()
	require.Equal(t, []int32{5, 7, 8}, warmPartitions(ud, "in"))
}

// TestWarmAdvertiseCompose: PreferWarm and Advertise compose in either
// order into one wrapper advertising both, which carries the previous
// assignment as Advertise alone does.
func TestWarmAdvertiseCompose(t *testing.T) {
	s := sarama.NewBalanceStrategySticky()
	require.Equal(t, s, Advertise(s, ""))
	require.Equal(t, s, PreferWarm(s, "", constWarm(1)))
	require.Equal(t, s, PreferWarm(s, "in", nil))
	for _, c := range []sarama.BalanceStrategy{
		PreferWarm(Advertise(sarama.NewBalanceStrategySticky(), "10.0.0.1:9100"), "in", constWarm(4, 5)),
		Advertise(PreferWarm(sarama.NewBalanceStrategySticky(), "in", constWarm(4, 5)), "10.0.0.1:9100"),
	} {
		a := c.(*advertising)
		_, wrapped := a.BalanceStrategy.(*advertising)
		require.False(t, wrapped)
		prev, err := a.AssignmentData("m1", map[string][]int32{"in": {0, 2}}, 7)
		require.NoError(t, err)
		a.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: map[string][]int32{"in": {0, 2}}, UserData: prev}, 7)
		ud, err := a.SubscriptionUserData([]string{"in"})
		require.NoError(t, err)
		require.Equal(t, "10.0.0.1:9100", advertisedAddr(ud))
		require.Equal(t, []int32{4, 5}, warmPartitions(ud, "in"))
		d, err := decodeStickyData(ud)
		require.NoError(t, err)
		require.Equal(t, int32(7), d.Generation)
		require.Equal(t, []int32{0, 2}, d.Topics["in"])
		require.Len(t, d.Topics, 3)
	}
}

// warmMember is the subscription of member id that owned prev of "in" at
// generation 7 and holds warm partitions warm (none when nil): the sticky
// user data carries prev for the eager protocol, OwnedPartitions for the
// cooperative one.
func warmMember(t *testing.T, newInner func() sarama.BalanceStrategy, id string, prev []int32, warm func() []int32) sarama.ConsumerGroupMemberMetadata {
	s := Advertise(newInner(), id+":9100")
	if warm != nil {
		s = PreferWarm(s, "in", warm)
	}
	a := s.(*advertising)
	asg := map[string][]int32{"in": prev}
	ud, err := a.AssignmentData(id, asg, 7)
	require.NoError(t, err)
	a.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: asg, UserData: ud}, 7)
	sub, err := a.SubscriptionUserData([]string{"in"})
	require.NoError(t, err)
	meta := sarama.ConsumerGroupMemberMetadata{Version: 2, Topics: []string{"in"}, UserData: sub, GenerationID: 7}
	if a.Name() == sarama.CooperativeStickyBalanceStrategyName {
		meta.OwnedPartitions = []*sarama.OwnedPartition{{Topic: "in", Partitions: prev}}
	}
	return meta
}

// checkPlan: plan assigns exactly the partitions 0..n-1 of "in", each once,
// and no other topic.
func checkPlan(t *testing.T, plan sarama.BalanceStrategyPlan, n int) {
	var all []int32
	for id, ts := range plan {
		for topic := range ts {
			require.Equal(t, "in", topic, "member %s", id)
		}
		all = append(all, ts["in"]...)
	}
	slices.Sort(all)
	want := make([]int32, n)
	for i := range want {
		want[i] = int32(i)
	}
	require.Equal(t, want, all, "plan %v", plan)
}

// TestWarmOldLeader: a leader of an older build, the plain sticky strategy,
// reads subscriptions carrying warm entries without error, keeps the
// previous assignment and never assigns an entry as a topic.
func TestWarmOldLeader(t *testing.T) {
	for _, newInner := range innerStrategies {
		members := map[string]sarama.ConsumerGroupMemberMetadata{
			"m1": warmMember(t, newInner, "m1", []int32{0, 2}, constWarm(1, 3, 4, 5)),
			"m2": warmMember(t, newInner, "m2", nil, constWarm(0, 2)),
			"m3": {Topics: []string{"in"}},
		}
		plan, err := newInner().Plan(members, map[string][]int32{"in": {0, 1, 2, 3, 4, 5}})
		require.NoError(t, err)
		checkPlan(t, plan, 6)
		require.Subset(t, plan["m1"]["in"], []int32{0, 2})
	}
}

// recording is a strategy keeping a copy of the last plan it made.
type recording struct {
	sarama.BalanceStrategy
	last sarama.BalanceStrategyPlan
}

func (r *recording) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	plan, err := r.BalanceStrategy.Plan(members, topics)
	r.last = sarama.BalanceStrategyPlan{}
	for id, ts := range plan {
		r.last[id] = map[string][]int32{}
		for topic, ps := range ts {
			r.last[id][topic] = slices.Clone(ps)
		}
	}
	return plan, err
}

// TestWarmPlanWithoutWarmData: with no member advertising a warm set the
// plan is the wrapped strategy's.
func TestWarmPlanWithoutWarmData(t *testing.T) {
	for _, newInner := range innerStrategies {
		members := map[string]sarama.ConsumerGroupMemberMetadata{
			"m1": warmMember(t, newInner, "m1", []int32{0, 1, 2}, nil),
			"m2": warmMember(t, newInner, "m2", []int32{3, 4, 5}, constWarm()),
			"m3": {Topics: []string{"in"}},
		}
		rec := &recording{BalanceStrategy: newInner()}
		plan, err := PreferWarm(Advertise(rec, "m1:9100"), "in", constWarm(7)).Plan(members, map[string][]int32{"in": {0, 1, 2, 3, 4, 5, 6, 7, 8}})
		require.NoError(t, err)
		require.Equal(t, rec.last, plan)
		checkPlan(t, plan, 9)
	}
}

// warmHolders is, per partition of "in", the members advertising it warm.
func warmHolders(members map[string]sarama.ConsumerGroupMemberMetadata) map[int32][]string {
	h := map[int32][]string{}
	for _, id := range slices.Sorted(maps.Keys(members)) {
		for _, p := range warmPartitions(members[id].UserData, "in") {
			h[p] = append(h[p], id)
		}
	}
	return h
}

// swappable says whether plan gives an orphan to a member not warm for it
// while a warm holder of it got an orphan it is not warm for.
func swappable(plan sarama.BalanceStrategyPlan, orphans []int32, holders map[int32][]string) bool {
	at := map[int32]string{}
	for id, ts := range plan {
		for _, p := range ts["in"] {
			at[p] = id
		}
	}
	for _, o := range orphans {
		if slices.Contains(holders[o], at[o]) {
			continue
		}
		for _, w := range holders[o] {
			for _, q := range orphans {
				if at[q] == w && !slices.Contains(holders[q], w) {
					return true
				}
			}
		}
	}
	return false
}

func warmPlaced(plan sarama.BalanceStrategyPlan, holders map[int32][]string) int {
	n := 0
	for id, ts := range plan {
		for _, p := range ts["in"] {
			if slices.Contains(holders[p], id) {
				n++
			}
		}
	}
	return n
}

// TestWarmSwap: m3 has left, orphaning its partitions; m1 and m2 hold
// some of them warm. After Plan no swap is left to make, counts are the
// wrapped plan's and previously owned partitions stay put. The wrapped
// plan varies from run to run, so it runs until the wrapped plan needed
// swaps a few times.
func TestWarmSwap(t *testing.T) {
	topics := map[string][]int32{"in": {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	prev := map[string][]int32{"m1": {0, 1, 2}, "m2": {3, 4, 5}} // m3 owned 6..10
	orphans := []int32{6, 7, 8, 9, 10}
	for _, newInner := range innerStrategies {
		name := newInner().Name()
		members := map[string]sarama.ConsumerGroupMemberMetadata{
			"m1": warmMember(t, newInner, "m1", prev["m1"], constWarm(3, 6, 7)), // 3 stays m2's
			"m2": warmMember(t, newInner, "m2", prev["m2"], constWarm(8, 9)),
		}
		holders := warmHolders(members)
		swapped := 0
		for i := 0; i < 200 && swapped < 3; i++ {
			rec := &recording{BalanceStrategy: newInner()}
			plan, err := PreferWarm(rec, "in", constWarm()).Plan(members, topics)
			require.NoError(t, err, name)
			checkPlan(t, plan, len(topics["in"]))
			for id := range members {
				require.Len(t, plan[id]["in"], len(rec.last[id]["in"]), "%s %s", name, id)
				require.Subset(t, rec.last[id]["in"], prev[id])
				require.Subset(t, plan[id]["in"], prev[id])
			}
			require.False(t, swappable(plan, orphans, holders), "%s: plan %v, warm %v", name, plan, holders)
			if swappable(rec.last, orphans, holders) {
				swapped++
				require.Greater(t, warmPlaced(plan, holders), warmPlaced(rec.last, holders), name)
			} else {
				require.Equal(t, rec.last, plan, name)
			}
		}
		require.Equal(t, 3, swapped, "%s: the wrapped plan never needed a swap", name)
	}
}

// TestWarmSwapRule: the swap on a plan made by hand: it prefers a
// partition the giving member is warm for, never touches owned partitions
// or a topic one of the two does not subscribe to, and is deterministic.
func TestWarmSwapRule(t *testing.T) {
	entries := func(ents ...string) []byte {
		d := stickyData{Topics: map[string][]int32{}, Generation: 7}
		for _, e := range ents {
			d.Topics[e] = nil
		}
		return d.encode()
	}
	members := map[string]sarama.ConsumerGroupMemberMetadata{
		"a": {Topics: []string{"in", "x"}, OwnedPartitions: []*sarama.OwnedPartition{{Topic: "in", Partitions: []int32{0}}},
			UserData: entries(warmEntry("in", []int32{4}))},
		"b": {Topics: []string{"in"}, OwnedPartitions: []*sarama.OwnedPartition{{Topic: "in", Partitions: []int32{1}}},
			UserData: entries(warmEntry("in", []int32{0, 2}), warmEntry("x", []int32{0}))},
	}
	for range 10 {
		plan := sarama.BalanceStrategyPlan{
			"a": {"in": {0, 2, 5}, "x": {0}},
			"b": {"in": {1, 3, 4, 6}},
		}
		preferWarm(plan, members)
		for _, ts := range plan {
			for _, ps := range ts {
				slices.Sort(ps)
			}
		}
		// a's 2 (b is warm) goes to b for 4, the lowest of b's cold
		// partitions that a is warm for; a's 5 has no warm holder; a's
		// owned 0 stays although b is warm for it; b is no candidate for x.
		require.Equal(t, sarama.BalanceStrategyPlan{
			"a": {"in": {0, 4, 5}, "x": {0}},
			"b": {"in": {1, 2, 3, 6}},
		}, plan)
	}
}
