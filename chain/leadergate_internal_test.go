package chain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestGateRuleScenarios runs the partition gate's rule (passes) over the
// scenarios in testdata/gate (pebble's datadriven format; -rewrite
// rewrites the expected output). A scenario is
//
//	gate distance=N lateness=D
//	<one check a line: o=N [t=N] next=N wm=N>
//
// where t (unix nanos) is the record's event time and a record without it
// is one the stage does not process (only the offset rule applies). Each
// check prints pass or wait; whatever the file says, a pass that lets the
// follower reach its leader's checkpoint minus the distance fails the test.
func TestGateRuleScenarios(t *testing.T) {
	datadriven.RunTest(t, "testdata/gate", func(t *testing.T, td *datadriven.TestData) string {
		if td.Cmd != "gate" {
			td.Fatalf(t, "unknown command %q", td.Cmd)
		}
		var distance int64
		var lateness time.Duration
		td.ScanArgs(t, "distance", &distance)
		var ls string
		td.ScanArgs(t, "lateness", &ls)
		lateness, err := time.ParseDuration(ls)
		if err != nil {
			td.Fatalf(t, "lateness: %v", err)
		}
		var b strings.Builder
		for line := range strings.SplitSeq(strings.TrimSpace(td.Input), "\n") {
			var o, et, next, wm int64
			processing := strings.Contains(line, " t=")
			var n int
			if processing {
				n, err = fmt.Sscanf(line, "o=%d t=%d next=%d wm=%d", &o, &et, &next, &wm)
			} else {
				n, err = fmt.Sscanf(line, "o=%d next=%d wm=%d", &o, &next, &wm)
				n++
			}
			if err != nil || n != 4 {
				td.Fatalf(t, "check %q: %v", line, err)
			}
			need := int64(0)
			if processing {
				need = addSaturating(et, int64(lateness))
			}
			ok := passes(next, wm, o, distance, processing, need)
			if ok && (o >= next-distance || processing && need >= wm) {
				td.Fatalf(t, "%q passes beyond the leader's checkpoint minus the distance", line)
			}
			verdict := "wait"
			if ok {
				verdict = "pass"
			}
			fmt.Fprintf(&b, "%s: %s\n", line, verdict)
		}
		return b.String()
	})
}
