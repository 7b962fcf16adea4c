package store_test

import (
	"testing"
	"time"

	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/store"
)

func TestSnapshotSeesCheckpointedStateOnly(t *testing.T) {
	db, err := store.OpenPebble(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ps, err := db.OpenPartition("events", 3, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	a := ps.Stage(0)
	for i, k := range []string{"x/1", "x/2", "y/1"} {
		if err := a.Set(int64(i), []byte(k), []byte("v"+k), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ps.Checkpoint([]commit.Checkpoint{{Stage: "a", Next: 2, Watermark: 7}, {Stage: "b", Next: 1}}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	snap, err := db.Snapshot("events", 3)
	if err != nil {
		t.Fatal(err)
	}
	// Written after the snapshot: not seen.
	if err := ps.Checkpoint([]commit.Checkpoint{{Stage: "a", Next: 3}, {Stage: "b", Next: 1}}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	cp, ok, err := snap.Checkpoint("a")
	if err != nil || !ok || cp.Next != 2 || cp.Watermark != 7 {
		t.Fatalf("checkpoint a = %+v, %v, %v; want Next 2, Watermark 7", cp, ok, err)
	}
	if _, ok, _ := snap.Checkpoint("c"); ok {
		t.Fatal("checkpoint of an unknown stage")
	}
	var got []string
	if err := snap.Scan([]byte("x/"), []byte("x0"), func(k, v []byte) bool {
		got = append(got, string(k)+"="+string(v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "x/1=vx/1" || got[1] != "x/2=vx/2" {
		t.Fatalf("scan = %q, want x/1 and x/2 (offsets 0 and 1, before Next 2)", got)
	}
	if _, ok, err := snap.Get([]byte("y/1")); ok || err != nil {
		t.Fatalf("y/1 (offset 2, after the snapshot's checkpoint) seen: %v %v", ok, err)
	}
	if v, ok, err := snap.Get([]byte("x/2")); !ok || err != nil || string(v) != "vx/2" {
		t.Fatalf("get x/2 = %q %v %v", v, ok, err)
	}
	if _, _, err := (&store.PartitionSnapshot{}).Get([]byte("x")); err == nil {
		t.Fatal("a closed snapshot read")
	}
}
