package attribution_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

func rec(key, value string) *chain.Record {
	return &chain.Record{Topic: "events", Partition: 0, Offset: 7, Key: []byte(key), Value: []byte(value), Timestamp: t0}
}

func TestDecodeValid(t *testing.T) {
	dec := attribution.Decoder(attribution.DefaultConfig())
	for _, tc := range []struct {
		name, key, value string
		want             attribution.Event
	}{
		{"click", "u1", `{"event_id":"c1","type":"click","user_id":"u1","time":"2026-11-29T10:00:00Z","campaign_id":"cmp-7","channel":"search"}`,
			attribution.Event{EventID: "c1", Type: "click", UserID: "u1", Time: t0, CampaignID: "cmp-7", Channel: "search"}},
		{"click without channel, unknown fields", "u1", `{"x":{"y":[1,{"z":null}],"w":"\u00e9"},"event_id":"c1","type":"click","user_id":"u1","time":"2026-11-29T10:00:00Z","campaign_id":"c","Event_ID":5,"n":-1.5e-3}`,
			attribution.Event{EventID: "c1", Type: "click", UserID: "u1", Time: t0, CampaignID: "c"}},
		{"install with offset time and nanos", "u1", ` { "event_id" : "i1" , "type":"install","user_id":"u1","time":"2026-11-29T12:00:00.123456789+02:00","app_id":"app-1"} `,
			attribution.Event{EventID: "i1", Type: "install", UserID: "u1", Time: t0.Add(123456789)}},
		{"purchase", "u1", `{"event_id":"p1","type":"purchase","user_id":"u1","time":"2026-11-29T11:00:00Z","revenue":4.99,"currency":"USD"}`,
			attribution.Event{EventID: "p1", Type: "purchase", UserID: "u1", Time: t0.Add(time.Hour), Revenue: 4.99, RevenueText: "4.99", Currency: "USD"}},
		{"purchase zero revenue, exponent, lower-case currency", "u1", `{"event_id":"p1","type":"purchase","user_id":"u1","time":"2026-11-29T11:00:00Z","revenue":0E+0,"currency":"eur"}`,
			attribution.Event{EventID: "p1", Type: "purchase", UserID: "u1", Time: t0.Add(time.Hour), RevenueText: "0E+0", Currency: "eur"}},
		{"escaped strings", "ü\"1", `{"event_id":"c\"1\\","type":"cl\u0069ck","user_id":"\u00fc\"1","time":"2026-11-29T10:00:00Z","campaign_id":"a\nb"}`,
			attribution.Event{EventID: `c"1\`, Type: "click", UserID: "ü\"1", Time: t0, CampaignID: "a\nb"}},
		{"raw UTF-8", "ü1", `{"event_id":"é€𝄞","type":"install","user_id":"ü1","time":"2026-11-29T10:00:00Z"}`,
			attribution.Event{EventID: "é€𝄞", Type: "install", UserID: "ü1", Time: t0}},
		{"invalid UTF-8 is replaced", "u1", "{\"event_id\":\"a\xffb\",\"type\":\"install\",\"user_id\":\"u1\",\"time\":\"2026-11-29T10:00:00Z\"}",
			attribution.Event{EventID: "a\ufffdb", Type: "install", UserID: "u1", Time: t0}},
		{"escaped member name", "u1", `{"event\u005fid":"c1","type":"click","user_id":"u1","time":"2026-11-29T10:00:00Z","campaign_id":"c"}`,
			attribution.Event{EventID: "c1", Type: "click", UserID: "u1", Time: t0, CampaignID: "c"}},
		{"null counts as absent", "u1", `{"event_id":"i1","type":"install","user_id":"u1","time":"2026-11-29T10:00:00Z","campaign_id":null,"channel":null,"revenue":null}`,
			attribution.Event{EventID: "i1", Type: "install", UserID: "u1", Time: t0}},
		{"last duplicate name wins", "u1", `{"event_id":5,"event_id":"i1","type":"click","type":"install","user_id":"u1","time":"2026-11-29T10:00:00Z"}`,
			attribution.Event{EventID: "i1", Type: "install", UserID: "u1", Time: t0}},
		{"time exactly MaxClockSkew after the timestamp", "u1", `{"event_id":"i1","type":"install","user_id":"u1","time":"2026-11-29T11:00:00Z"}`,
			attribution.Event{EventID: "i1", Type: "install", UserID: "u1", Time: t0.Add(time.Hour)}},
		{"revenue on an install is only type-checked", "u1", `{"event_id":"i1","type":"install","user_id":"u1","time":"2026-11-29T10:00:00Z","revenue":-1e999}`,
			attribution.Event{EventID: "i1", Type: "install", UserID: "u1", Time: t0, RevenueText: "-1e999"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rec(tc.key, tc.value)
			d, err := dec.Decode(r)
			require.NoError(t, err)
			ev := d.Payload.(*attribution.Event)
			assert.Equal(t, tc.want.Type, d.Type)
			assert.True(t, tc.want.Time.Equal(d.Time))
			assert.Equal(t, time.UTC, d.Time.Location())
			got := *ev
			assert.True(t, tc.want.Time.Equal(got.Time), "time %v", got.Time)
			got.Time, tc.want.Time = time.Time{}, time.Time{}
			assert.Equal(t, tc.want, got)
			// The reference validator agrees.
			ref, err := reference.Parse(r, attribution.DefaultConfig())
			require.NoError(t, err)
			ref.Time = time.Time{}
			assert.Equal(t, got, ref)
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = 300
	dec := attribution.Decoder(cfg)
	const head = `"event_id":"e1","user_id":"u1","time":"2026-11-29T10:00:00Z"`
	for _, tc := range []struct{ name, key, value, reason string }{
		{"empty value", "u1", ``, "value is empty"},
		{"bad JSON", "u1", `{"event_id":"e1","type":"cli`, "not valid JSON"},
		{"bad JSON number", "u1", `{` + head + `,"type":"install","x":01}`, "not valid JSON"},
		{"bad JSON literal", "u1", `{` + head + `,"type":"install","x":nul}`, "not valid JSON"},
		{"bad JSON escape", "u1", `{` + head + `,"type":"install","x":"\q"}`, "not valid JSON"},
		{"control character", "u1", "{" + head + `,"type":"install","x":"a` + "\x01" + `"}`, "not valid JSON"},
		{"unclosed nested", "u1", `{` + head + `,"type":"install","x":[{"a":1}}`, "not valid JSON"},
		{"trailing comma", "u1", `{` + head + `,"type":"install",}`, "not valid JSON"},
		{"trailing data", "u1", `{` + head + `,"type":"install"} x`, "data after the top-level value"},
		{"two objects", "u1", `{` + head + `,"type":"install"}{}`, "data after the top-level value"},
		{"array", "u1", `["click"]`, "JSON array, not an object"},
		{"null", "u1", `null`, "JSON null, not an object"},
		{"string", "u1", `"x"`, "JSON string, not an object"},
		{"unknown type", "u1", `{` + head + `,"type":"view"}`, `type "view" is not click, install or purchase`},
		{"type case", "u1", `{` + head + `,"type":"Click","campaign_id":"c"}`, `type "Click"`},
		{"missing type", "u1", `{` + head + `}`, "type is missing"},
		{"missing event_id", "u1", `{"user_id":"u1","type":"install","time":"2026-11-29T10:00:00Z"}`, "event_id must be a non-empty string"},
		{"empty event_id", "u1", `{"event_id":"","user_id":"u1","type":"install","time":"2026-11-29T10:00:00Z"}`, "event_id must be a non-empty string"},
		{"event_id case", "u1", `{"Event_ID":"e1","user_id":"u1","type":"install","time":"2026-11-29T10:00:00Z"}`, "event_id must be a non-empty string"},
		{"empty user_id", "", `{"event_id":"e1","user_id":"","type":"install","time":"2026-11-29T10:00:00Z"}`, "user_id must be a non-empty string"},
		{"event_id number", "u1", `{"event_id":12,"user_id":"u1","type":"install","time":"2026-11-29T10:00:00Z"}`, "event_id must be a string, got number"},
		{"user_id object", "u1", `{"event_id":"e","user_id":{},"type":"install","time":"2026-11-29T10:00:00Z"}`, "user_id must be a string, got object"},
		{"type bool", "u1", `{` + head + `,"type":true}`, "type must be a string, got boolean"},
		{"missing time", "u1", `{"event_id":"e1","user_id":"u1","type":"install"}`, "time is missing"},
		{"time not RFC 3339", "u1", `{"event_id":"e1","user_id":"u1","type":"install","time":"2026-11-29 10:00:00"}`, `time "2026-11-29 10:00:00" is not RFC 3339`},
		{"time without zone", "u1", `{"event_id":"e1","user_id":"u1","type":"install","time":"2026-11-29T10:00:00"}`, "is not RFC 3339"},
		{"time number", "u1", `{"event_id":"e1","user_id":"u1","type":"install","time":1764410400}`, "time must be a string, got number"},
		{"time before 1970", "u1", `{"event_id":"e1","user_id":"u1","type":"install","time":"1969-12-31T23:59:59Z"}`, "outside the supported range"},
		{"time at the epoch", "u1", `{"event_id":"e1","user_id":"u1","type":"install","time":"1970-01-01T00:00:00Z"}`, "outside the supported range"},
		{"future time beyond skew", "u1", `{"event_id":"e1","user_id":"u1","type":"install","time":"2026-11-29T11:00:00.000000001Z"}`, "after the record timestamp"},
		{"click without campaign", "u1", `{` + head + `,"type":"click","channel":"x"}`, "click needs a non-empty campaign_id"},
		{"click empty campaign", "u1", `{` + head + `,"type":"click","campaign_id":""}`, "click needs a non-empty campaign_id"},
		{"channel number", "u1", `{` + head + `,"type":"click","campaign_id":"c","channel":7}`, "channel must be a string, got number"},
		{"campaign on install mistyped", "u1", `{` + head + `,"type":"install","campaign_id":[]}`, "campaign_id must be a string, got array"},
		{"purchase missing revenue", "u1", `{` + head + `,"type":"purchase","currency":"USD"}`, "purchase needs revenue"},
		{"purchase negative revenue", "u1", `{` + head + `,"type":"purchase","revenue":-0.01,"currency":"USD"}`, "revenue -0.01 is negative"},
		{"purchase string revenue", "u1", `{` + head + `,"type":"purchase","revenue":"4.99","currency":"USD"}`, "revenue must be a number, got string"},
		{"purchase huge revenue", "u1", `{` + head + `,"type":"purchase","revenue":1e400,"currency":"USD"}`, "revenue 1e400 is out of range"},
		{"purchase missing currency", "u1", `{` + head + `,"type":"purchase","revenue":1}`, `currency "" is not a 3-letter code`},
		{"purchase 2-letter currency", "u1", `{` + head + `,"type":"purchase","revenue":1,"currency":"US"}`, `currency "US"`},
		{"purchase 4-letter currency", "u1", `{` + head + `,"type":"purchase","revenue":1,"currency":"EURO"}`, `currency "EURO"`},
		{"purchase non-letter currency", "u1", `{` + head + `,"type":"purchase","revenue":1,"currency":"U$D"}`, `currency "U$D"`},
		{"purchase currency number", "u1", `{` + head + `,"type":"purchase","revenue":1,"currency":840}`, "currency must be a string, got number"},
		{"oversized", "u1", `{` + head + `,"type":"install","pad":"` + strings.Repeat("x", 300) + `"}`, "more than MaxRecordBytes (300)"},
		{"key differs from user_id", "u2", `{` + head + `,"type":"install"}`, `kafka key "u2" differs from user_id "u1"`},
		{"nil key", "", `{` + head + `,"type":"install"}`, `kafka key "" differs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rec(tc.key, tc.value)
			_, err := dec.Decode(r)
			require.Error(t, err)
			assert.True(t, errors.Is(err, attribution.ErrInvalid))
			assert.Contains(t, err.Error(), tc.reason)
			assert.True(t, strings.HasPrefix(err.Error(), "invalid attribution event: "), err.Error())
			_, rerr := reference.Parse(r, cfg)
			assert.Error(t, rerr, "the reference validator must reject it too")
		})
	}
}

func TestDecodeDepth(t *testing.T) {
	cfg := attribution.DefaultConfig()
	dec := attribution.Decoder(cfg)
	nested := func(n int) string {
		return `{"event_id":"i1","type":"install","user_id":"u1","time":"2026-11-29T10:00:00Z","x":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
	}
	// encoding/json allows 10000 nested containers, the top object included.
	_, err := dec.Decode(rec("u1", nested(9999)))
	require.NoError(t, err)
	_, err = reference.Parse(rec("u1", nested(9999)), cfg)
	require.NoError(t, err)
	_, err = dec.Decode(rec("u1", nested(10000)))
	require.ErrorContains(t, err, "exceeded max depth")
	_, err = reference.Parse(rec("u1", nested(10000)), cfg)
	require.Error(t, err)
}

func TestDecodeNoTimestamp(t *testing.T) {
	dec := attribution.Decoder(attribution.DefaultConfig())
	r := rec("u1", `{"event_id":"i1","type":"install","user_id":"u1","time":"2100-01-01T00:00:00Z"}`)
	r.Timestamp = time.Time{}
	_, err := dec.Decode(r)
	require.NoError(t, err, "no Kafka timestamp: the skew check is skipped")
}

// FuzzDecode checks the decoder against the reference's independent
// validator: same verdict, same fields.
func FuzzDecode(f *testing.F) {
	for _, v := range []string{
		click("c1", "u1", 0, "cmp"), install("i1", "u1", time.Minute), purchase("p1", "u1", time.Hour, "4.99"),
		`{"event_id":"c\"1","type":"click","user_id":"u1","time":"2026-11-29T10:00:00+01:00","campaign_id":"é","x":[1,{"y":null}]}`,
		`{"event_id":"p","type":"purchase","user_id":"u1","time":"2026-11-29T10:00:00Z","revenue":1e400,"currency":"usd"}`,
		`{"event_id":"p","type":"purchase","user_id":"u1","time":"2026-11-29T10:00:00Z","revenue":"1","currency":"usd"}`,
		`{"event\u005fid":"i","type":"install","user_id":"u1","time":"2026-11-29T10:00:00.5Z","event_id":null}`,
		`[]`, `null`, `{} {}`, `{"a":}`, "{\"event_id\":\"\xff\",\"type\":\"install\",\"user_id\":\"u1\",\"time\":\"2026-11-29T10:00:00Z\"}",
	} {
		f.Add([]byte(v), "u1")
	}
	cfg := attribution.DefaultConfig()
	cfg.MaxRecordBytes = 4096
	dec := attribution.Decoder(cfg)
	f.Fuzz(func(t *testing.T, value []byte, key string) {
		r := &chain.Record{Key: []byte(key), Value: value, Timestamp: t0}
		d, err := dec.Decode(r)
		ref, rerr := reference.Parse(r, cfg)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("decoder: %v, reference: %v, value %q", err, rerr, value)
		}
		if err != nil {
			return
		}
		got := *d.Payload.(*attribution.Event)
		if !got.Time.Equal(ref.Time) || !d.Time.Equal(ref.Time) {
			t.Fatalf("time %v vs %v", got.Time, ref.Time)
		}
		got.Time, ref.Time = time.Time{}, time.Time{}
		if got != ref {
			t.Fatalf("decoder %+v, reference %+v", got, ref)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	dec := attribution.Decoder(attribution.DefaultConfig())
	for _, bc := range []struct{ name, value string }{
		{"click", `{"event_id":"c-1234567","type":"click","user_id":"u-0042","time":"2026-11-29T10:00:00Z","campaign_id":"cmp-7","channel":"search"}`},
		{"install", `{"event_id":"i-1234567","type":"install","user_id":"u-0042","time":"2026-11-29T10:05:00.123Z","app_id":"app-1"}`},
		{"purchase", `{"event_id":"p-1234567","type":"purchase","user_id":"u-0042","time":"2026-11-29T11:00:00Z","revenue":4.99,"currency":"USD"}`},
		{"escaped+unknown", `{"event_id":"c-\u00e9","type":"click","user_id":"u-0042","time":"2026-11-29T10:00:00+01:00","campaign_id":"cmp-7","meta":{"a":[1,2,{"b":null}]}}`},
	} {
		r := rec("u-0042", bc.value)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.value)))
			for b.Loop() {
				if _, err := dec.Decode(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("reference-validator/click", func(b *testing.B) {
		r := rec("u-0042", `{"event_id":"c-1234567","type":"click","user_id":"u-0042","time":"2026-11-29T10:00:00Z","campaign_id":"cmp-7","channel":"search"}`)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference.Parse(r, attribution.DefaultConfig()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
