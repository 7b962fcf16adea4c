package attribution

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// TimeFormat is the layout of every time in outputs: RFC 3339 in UTC with
// exactly nine fractional digits ("2026-11-29T10:05:00.000000000Z").
// time.RFC3339Nano is not used because it drops trailing zeros, which would
// give one instant several spellings.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// SourceHeader is the header added to every output: "<partition>/<offset>"
// of the input record that produced it.
const SourceHeader = "differential-source"

// InstallOutput is the content of an install output record.
type InstallOutput struct {
	EventID    string
	UserID     string
	Time       time.Time
	Attributed bool
	// ClickID, CampaignID, Channel and ClickTime are the winning click's
	// (empty, and ClickTime zero, for an organic install).
	ClickID    string
	CampaignID string
	Channel    string
	ClickTime  time.Time
}

// PurchaseOutput is the content of a purchase output record.
type PurchaseOutput struct {
	EventID string
	UserID  string
	Time    time.Time
	// InstallID and CampaignID are the attributed install's (empty when there
	// is none; CampaignID is empty when the install was organic).
	InstallID  string
	CampaignID string
	// Revenue is a JSON number literal, written verbatim.
	Revenue  string
	Currency string
}

// AppendInstall appends the JSON of o to dst, fields in DESIGN.md "Attribution rules" order:
//
//	{"kind":"install","event_id":…,"user_id":…,"time":…,"attributed":…,"click_id":…,"campaign_id":…,"channel":…,"click_time":…}
//
// An organic install has "attributed":false and "" for click_id,
// campaign_id, channel and click_time.
func AppendInstall(dst []byte, o InstallOutput) []byte {
	dst = append(dst, `{"kind":"install","event_id":`...)
	dst = AppendString(dst, o.EventID)
	dst = append(dst, `,"user_id":`...)
	dst = AppendString(dst, o.UserID)
	dst = append(dst, `,"time":`...)
	dst = AppendTime(dst, o.Time)
	if o.Attributed {
		dst = append(dst, `,"attributed":true,"click_id":`...)
		dst = AppendString(dst, o.ClickID)
		dst = append(dst, `,"campaign_id":`...)
		dst = AppendString(dst, o.CampaignID)
		dst = append(dst, `,"channel":`...)
		dst = AppendString(dst, o.Channel)
		dst = append(dst, `,"click_time":`...)
		dst = AppendTime(dst, o.ClickTime)
	} else {
		dst = append(dst, `,"attributed":false,"click_id":"","campaign_id":"","channel":"","click_time":""`...)
	}
	return append(dst, '}')
}

// AppendPurchase appends the JSON of p to dst, fields in DESIGN.md "Attribution rules" order:
//
//	{"kind":"purchase","event_id":…,"user_id":…,"time":…,"install_id":…,"campaign_id":…,"revenue":…,"currency":…}
func AppendPurchase(dst []byte, p PurchaseOutput) []byte {
	dst = append(dst, `{"kind":"purchase","event_id":`...)
	dst = AppendString(dst, p.EventID)
	dst = append(dst, `,"user_id":`...)
	dst = AppendString(dst, p.UserID)
	dst = append(dst, `,"time":`...)
	dst = AppendTime(dst, p.Time)
	dst = append(dst, `,"install_id":`...)
	dst = AppendString(dst, p.InstallID)
	dst = append(dst, `,"campaign_id":`...)
	dst = AppendString(dst, p.CampaignID)
	dst = append(dst, `,"revenue":`...)
	if p.Revenue == "" {
		dst = append(dst, '0')
	} else {
		dst = append(dst, p.Revenue...)
	}
	dst = append(dst, `,"currency":`...)
	dst = AppendString(dst, p.Currency)
	return append(dst, '}')
}

// AppendTime appends t as a JSON string in TimeFormat (UTC).
func AppendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, TimeFormat)
	return append(dst, '"')
}

// SourceValue returns the SourceHeader value for partition p, offset o.
func SourceValue(p int32, o int64) []byte { return appendSource(make([]byte, 0, 24), p, o) }

func appendSource(dst []byte, p int32, o int64) []byte {
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, '/')
	return strconv.AppendInt(dst, o, 10)
}

// ParseSource parses a SourceHeader value written by SourceValue: the
// partition and offset of the input record an output came from. Anything
// else — no '/', a sign, a non-decimal or out-of-range number, a negative
// partition or offset — is an error quoting the value.
func ParseSource(v []byte) (partition int32, offset int64, err error) {
	ps, os, ok := bytes.Cut(v, []byte{'/'})
	p, err1 := parseNonNegative(ps, 31)
	o, err2 := parseNonNegative(os, 63)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("attribution: %s header %q is not <partition>/<offset>", SourceHeader, v)
	}
	return int32(p), o, nil
}

// parseNonNegative parses a decimal number of digits only that fits in
// bits bits.
func parseNonNegative(b []byte, bits int) (int64, error) {
	if len(b) == 0 || b[0] < '0' || b[0] > '9' {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(string(b), 10, bits+1)
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string: '"' and '\\' escaped, control
// characters as \n, \r, \t or \u00XX, invalid UTF-8 as \ufffd, everything
// else verbatim.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
