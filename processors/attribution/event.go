package attribution

import (
	"errors"
	"time"
)

// Event types (the "type" field; also Decoded.Type).
const (
	TypeClick    = "click"
	TypeInstall  = "install"
	TypePurchase = "purchase"
)

// Stage names of Chain.
const (
	StageClick    = "click"
	StageInstall  = "install"
	StagePurchase = "purchase"
)

// Event is a validated input event: the Value of the chain.Decoded that
// Decoder returns. Strings are the JSON strings' values; Time is in UTC.
type Event struct {
	EventID string
	Type    string // TypeClick, TypeInstall or TypePurchase
	UserID  string
	Time    time.Time
	// CampaignID and Channel are a click's (CampaignID non-empty for clicks).
	CampaignID string
	Channel    string
	// Revenue and Currency are a purchase's. RevenueText is the revenue's JSON
	// number exactly as written in the input; outputs copy it verbatim.
	Revenue     float64
	RevenueText string
	Currency    string
}

// ErrInvalid is wrapped by every error Decoder returns; the error's text is
// the dead-letter reason.
var ErrInvalid = errors.New("invalid attribution event")
