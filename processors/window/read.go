package window

import (
	"fmt"
	"time"
)

// CountAt returns the count a stored state value of the counter (the value
// at StateKey(key), as Add wrote it) gives at event time t: the counted
// records of the key whose bucket lies in the window of t. It is what Add
// would return for a record at time t before counting that record, given
// that no record after the value was written changed it; a query reads it
// at the stage's watermark. An empty value (the key has none) counts 0.
func (c *Counter) CountAt(stored []byte, t time.Time) (int64, error) {
	if len(stored) == 0 {
		return 0, nil
	}
	var v value
	if err := v.decode(stored); err != nil {
		return 0, fmt.Errorf("window %q: %w", c.cfg.Name, err)
	}
	return v.count(t.UnixNano()/c.b, c.nb), nil
}
