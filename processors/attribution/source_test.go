package attribution_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/differential-dev/differential/processors/attribution"
)

func TestParseSourceReadsWhatSourceValueWrites(t *testing.T) {
	for _, c := range []struct {
		p int32
		o int64
	}{{0, 0}, {12, 345}, {math.MaxInt32, math.MaxInt64}} {
		p, o, err := attribution.ParseSource(attribution.SourceValue(c.p, c.o))
		require.NoError(t, err)
		require.Equal(t, c.p, p)
		require.Equal(t, c.o, o)
	}
	for _, bad := range []string{"", "/", "1", "1/", "/2", "-1/2", "1/-2", "+1/2", "1/+2", "a/2", "1/2x", "1/2/3",
		"2147483648/0", "0/9223372036854775808", " 1/2"} {
		_, _, err := attribution.ParseSource([]byte(bad))
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "differential-source header")
	}
}
