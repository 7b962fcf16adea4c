package kafka

import (
	"testing"

	"github.com/IBM/sarama"
)

// TestAdvertiseSticky: the advertised address rides in the sticky
// strategy's user data, which a leader's sticky Plan (with or without the
// wrapper) reads without error, keeping the previous assignment.
func TestAdvertiseSticky(t *testing.T) {
	for _, inner := range []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky(), sarama.NewBalanceStrategyCooperativeSticky()} {
		a := Advertise(inner, "10.0.0.1:9100").(*advertising)
		fresh, err := a.SubscriptionUserData([]string{"in"})
		if err != nil {
			t.Fatal(err)
		}
		if got := advertisedAddr(fresh); got != "10.0.0.1:9100" {
			t.Fatalf("%s: fresh member advertises %q", inner.Name(), got)
		}
		prev, err := inner.AssignmentData("m1", map[string][]int32{"in": {0, 2}}, 7)
		if err != nil {
			t.Fatal(err)
		}
		a.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: map[string][]int32{"in": {0, 2}}, UserData: prev}, 7)
		again, err := a.SubscriptionUserData([]string{"in"})
		if err != nil {
			t.Fatal(err)
		}
		if got := advertisedAddr(again); got != "10.0.0.1:9100" {
			t.Fatalf("%s: member advertises %q after an assignment", inner.Name(), got)
		}
		if len(prev) > 0 {
			d, err := decodeStickyData(again)
			if err != nil || d.Generation != 7 || len(d.Topics["in"]) != 2 {
				t.Fatalf("%s: carried assignment %+v, %v; want in:[0 2] at generation 7", inner.Name(), d, err)
			}
		}
		members := map[string]sarama.ConsumerGroupMemberMetadata{
			"m1": {Topics: []string{"in"}, UserData: again},
			"m2": {Topics: []string{"in"}, UserData: fresh},
			"m3": {Topics: []string{"in"}}, // a member that advertises nothing
		}
		for _, s := range []sarama.BalanceStrategy{inner, a} {
			plan, err := s.Plan(members, map[string][]int32{"in": {0, 1, 2, 3, 4, 5}})
			if err != nil {
				t.Fatalf("%s plan: %v", inner.Name(), err)
			}
			n := 0
			for _, ts := range plan {
				n += len(ts["in"])
				if _, ok := ts[advertiseTopicPrefix+"10.0.0.1:9100"]; ok {
					t.Fatalf("%s: the address was assigned as a topic: %v", inner.Name(), plan)
				}
			}
			if n != 6 {
				t.Fatalf("%s: plan %v assigns %d partitions, want 6", inner.Name(), plan, n)
			}
		}
	}
	if advertisedAddr(nil) != "" || advertisedAddr([]byte{1, 2}) != "" {
		t.Fatal("an address from no user data")
	}
}
