package store_test

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/differential-dev/differential/commit"
	"github.com/differential-dev/differential/store"
)

// ExampleOpenPebble shows the atomicity a chain relies on (DESIGN I4): a
// stage's writes are persisted by the checkpoint whose position covers the
// record that made them, in one batch with every stage's position, and a
// write of a record not yet covered is not persisted. The chain makes these
// calls itself; a processor only sees Get, Set and Delete.
func ExampleOpenPebble() {
	dir, err := os.MkdirTemp("", "store-example-*")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	stages := []string{"click", "install"}

	db, err := store.OpenPebble(dir)
	if err != nil {
		log.Fatal(err)
	}
	p, err := db.OpenPartition("events", 0, stages)
	if err != nil {
		log.Fatal(err)
	}
	click, install := p.Stage(0), p.Stage(1)
	// The click stage processes offset 0 and remembers the click for a week;
	// the install stage processes offset 1 and reads it (every stage of a
	// partition sees every stage's writes at once).
	if err := click.Set(0, []byte("user-7"), []byte("click c-1"), time.Now().Add(7*24*time.Hour)); err != nil {
		log.Fatal(err)
	}
	v, ok, _ := install.Get([]byte("user-7"))
	fmt.Printf("install stage reads %q (found: %v)\n", v, ok)
	if err := install.Set(1, []byte("attributed/user-7"), []byte("c-1"), time.Time{}); err != nil {
		log.Fatal(err)
	}
	// A checkpoint where click has completed offset 0 but install has not
	// completed offset 1: the click's write is persisted, the install's is not.
	wm := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano()
	if err := p.Checkpoint([]commit.Checkpoint{{Stage: "click", Next: 1, Watermark: wm}, {Stage: "install", Next: 1}}, time.Time{}); err != nil {
		log.Fatal(err)
	}
	if err := db.Close(); err != nil { // a crash here loses nothing checkpointed
		log.Fatal(err)
	}

	db, err = store.OpenPebble(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	p, err = db.OpenPartition("events", 0, stages)
	if err != nil {
		log.Fatal(err)
	}
	cps, _, err := p.Checkpoints()
	if err != nil {
		log.Fatal(err)
	}
	for _, cp := range cps {
		fmt.Printf("%s resumes at offset %d\n", cp.Stage, cp.Next)
	}
	_, clickKept, _ := p.Stage(1).Get([]byte("user-7"))
	_, installKept, _ := p.Stage(1).Get([]byte("attributed/user-7"))
	fmt.Printf("after reopening: click kept %v, install's write kept %v\n", clickKept, installKept)
	// Output:
	// install stage reads "click c-1" (found: true)
	// click resumes at offset 1
	// install resumes at offset 1
	// after reopening: click kept true, install's write kept false
}
