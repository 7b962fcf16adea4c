package commit_test

import (
	"fmt"

	"github.com/differential-dev/differential/commit"
)

// A stage that completes records out of order: the position waits for the
// oldest one.
func ExampleTracker() {
	tr := commit.NewTracker(100, 64)
	for _, off := range []int64{100, 101, 104} { // 102, 103: compacted away
		_ = tr.Begin(off, off*10) // meta: the stage's watermark after off
	}
	for _, off := range []int64{104, 101, 100} {
		advanced, _ := tr.Complete(off)
		next, meta := tr.Position()
		fmt.Printf("complete %d: advanced=%v next=%d meta=%d\n", off, advanced, next, meta)
	}
	// Output:
	// complete 104: advanced=false next=100 meta=0
	// complete 101: advanced=false next=100 meta=0
	// complete 100: advanced=true next=105 meta=1040
}

func ExampleManager() {
	stages := []string{"click", "install", "purchase"}
	m := commit.NewManager(stages, 1000)
	offset, md, changed, _ := m.Next([]commit.Checkpoint{
		{Stage: "click", Next: 1042, Watermark: 1795946400000000000},
		{Stage: "install", Next: 1003},
		{Stage: "purchase", Next: 1000, Watermark: -1},
	})
	fmt.Println(offset, md, changed)
	m.Committed(offset, md) // once Kafka acknowledged it

	cps, ok := commit.DecodeMetadata(md, offset, stages) // at the next assignment
	fmt.Println(cps, ok)
	// Output:
	// 1000 dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1 true
	// [{click 1042 1795946400000000000 []} {install 1003 0 []} {purchase 1000 -1 []}] true
}
