package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/internal/testutil"
)

// TestDeadLetterLogSampling: per reason, the first dead letters are
// logged in full and the rest counted, one line per interval with the
// count of each reason; reasons that differ only in their particulars
// (sizes, values, times) are one reason; other lines pass; what is pending
// when the command ends is reported then.
func TestDeadLetterLogSampling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testutil.SyncBuffer
		log := newLogger(&buf, "json", "info").With("topic", "events", "partition", 3)
		dead := func(reason string, n int) {
			for i := range n {
				log.Warn(deadLetterMsg, "stage", "click", "offset", i, "reason", fmt.Sprintf(reason, i))
			}
		}
		lines := func() []map[string]any {
			var out []map[string]any
			for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if l == "" {
					continue
				}
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(l), &m), l)
				out = append(out, m)
			}
			return out
		}
		dead("invalid attribution event: value is %d bytes, more than MaxRecordBytes (65536)", 100)
		dead(`invalid attribution event: type "view%d" is not click, install or purchase`, 2)
		log.Info("partition started")
		got := lines()
		require.Len(t, got, deadLettersInFull+2+1, "3 of the first reason in full, both of the second, the other line")
		require.Equal(t, "invalid attribution event: value is 0 bytes, more than MaxRecordBytes (65536)", got[0]["reason"])
		require.Equal(t, 3.0, got[0]["partition"], "a full line keeps the logger's attributes")

		time.Sleep(deadLetterInterval)
		synctest.Wait()
		got = lines()
		require.Len(t, got, 7)
		report := got[6]
		require.Equal(t, "dead letters not logged one by one", report["msg"])
		require.Equal(t, "WARN", report["level"])
		require.Equal(t, 97.0, report["count"])
		require.Equal(t, map[string]any{"invalid attribution event: value is # bytes, more than MaxRecordBytes (#)": 97.0}, report["by_reason"])

		// A quiet interval reports nothing; the next dead letters of a
		// known reason are counted, and reported when the command ends.
		time.Sleep(2 * deadLetterInterval)
		synctest.Wait()
		require.Len(t, lines(), 7)
		dead(`invalid attribution event: type "x%d" is not click, install or purchase`, 5)
		require.Len(t, lines(), 7+1, "the third of that reason in full")
		flushLog(log)
		got = lines()
		require.Len(t, got, 9)
		require.Equal(t, 4.0, got[8]["count"])
		require.Equal(t, map[string]any{`invalid attribution event: type "…" is not click, install or purchase`: 4.0}, got[8]["by_reason"])
		// After the end, every line passes.
		dead("late %d", 5)
		require.Len(t, lines(), 14)
	})
}

func TestReasonClass(t *testing.T) {
	for in, want := range map[string]string{
		"invalid attribution event: time 2026-09-09T09:11:40.604156997Z is 3h0m0.000156997s after the record timestamp 2026-09-09T06:11:40.604Z (MaxClockSkew 1h0m0s)": "invalid attribution event: time # is # after the record timestamp # (MaxClockSkew #)",
		`invalid attribution event: kafka key "u155-other" differs from user_id "u155"`:                                                                                `invalid attribution event: kafka key "…" differs from user_id "…"`,
		"invalid attribution event: value is not valid JSON: unexpected end in string at byte 31":                                                                      "invalid attribution event: value is not valid JSON: unexpected end in string at byte #",
		`a "quoted \" escape" b`: `a "…" b`,
		"":                       "",
	} {
		require.Equal(t, want, reasonClass(in), in)
	}
}
