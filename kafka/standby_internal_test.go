package kafka

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The standby placement is a function of the group alone: every member
// computes the same one; a partition's standbys are distinct members
// other than its owner; a static member keeps its standbys across a
// restart (a new member id, the same instance id); and a member leaving
// moves only the standbys it held.
func TestStandbyPlacement(t *testing.T) {
	parts := make([]int32, 64)
	for i := range parts {
		parts[i] = int32(i)
	}
	group := func(ids ...string) groupView {
		g := groupView{State: "Stable"}
		for i, id := range ids {
			m := groupMember{ID: "member-" + id, Key: id, Owned: map[string][]int32{"in": nil}}
			for _, p := range parts {
				if int(p)%len(ids) == i {
					m.Owned["in"] = append(m.Owned["in"], p)
				}
			}
			g.Members = append(g.Members, m)
		}
		return g
	}
	owner := func(g groupView, p int32) string { return g.Members[int(p)%len(g.Members)].ID }
	g := group("a", "b", "c", "d")
	for _, replicas := range []int{1, 2, 3, 5} {
		pl := standbyPlacement(g, "in", parts, replicas)
		require.Equal(t, pl, standbyPlacement(g, "in", parts, replicas), "deterministic")
		holders := map[int32][]string{}
		for id, ps := range pl {
			for _, p := range ps {
				require.NotEqual(t, owner(g, p), id, "the owner is no standby of %d", p)
				holders[p] = append(holders[p], id)
			}
		}
		for _, p := range parts {
			require.Len(t, holders[p], min(replicas, 3), "partition %d", p)
			seen := map[string]bool{}
			for _, h := range holders[p] {
				require.False(t, seen[h], "partition %d: %s twice", p, h)
				seen[h] = true
			}
		}
		if replicas == 1 {
			for id, ps := range pl {
				require.Greater(t, len(ps), 64/3/3, "%s holds %d: the standbys spread", id, len(ps))
			}
		}
	}

	// A restarted static member: a new member id, the same key.
	re := group("a", "b", "c", "d")
	re.Members[1].ID = "member-b-restarted"
	before, after := standbyPlacement(g, "in", parts, 1), standbyPlacement(re, "in", parts, 1)
	require.Equal(t, before["member-b"], after["member-b-restarted"])

	// A member leaves; the owners stay as they were (they are the same
	// function of the partition here only for the members that remain).
	gone := groupView{State: "Stable"}
	for _, m := range g.Members {
		if m.Key != "d" {
			gone.Members = append(gone.Members, m)
		}
	}
	after = standbyPlacement(gone, "in", parts, 1)
	for _, id := range []string{"member-a", "member-b", "member-c"} {
		kept := map[int32]bool{}
		for _, p := range after[id] {
			kept[p] = true
		}
		for _, p := range before[id] {
			require.True(t, kept[p], "%s lost its standby of %d when d left", id, p)
		}
	}
	require.Empty(t, standbyPlacement(group("a"), "in", parts, 1), "one member: nobody to stand by")
	require.Empty(t, standbyPlacement(g, "in", parts, 0))
}
