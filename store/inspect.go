package store

// Entries returns the persisted entries of one partition (user key → user
// value, expiry stripped), as a restart would see them: pending writes of a
// running chain are not included. For inspection and tests (comparing the
// window state with a model); it reads the whole partition.
func (e *engine) Entries(topic string, partition int32) (map[string][]byte, error) {
	ks := newKeyspace(topic, partition)
	lo := appendTagged(nil, ks, entryTag, "") // <prefix>k/
	hi := append([]byte(nil), lo...)
	hi[len(hi)-1]++ // <prefix>k0: just past every entry key
	var keys [][]byte
	if err := e.be.scan(lo, hi, func(k []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	}); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(keys))
	err := e.be.getSorted(keys, func(i int, v []byte) {
		out[string(keys[i][len(lo):])] = append([]byte(nil), userValue(v)...)
	})
	return out, err
}
