package store

import (
	"bytes"
	"encoding/binary"
	"math"
	"time"
)

// Key layout (see doc.go). Every key of a partition starts with its prefix
//
//	p/<topic>/<partition, 4 bytes big-endian>/
//
// followed by one of
//
//	k/<user key>                      entry: <expiry be64><user value>
//	c/<stage>                         checkpoint: <version 1><next be64><watermark be64>
//
// Topic names cannot contain '/' (Kafka forbids it, OpenPartition rejects
// it), so the prefix of one partition is never a prefix of another's.
const (
	entryTag = 'k'
	// indexTag is the tag of format 2's persisted expiry index,
	// x/<expiry be64><user key>, which opening such a database deletes.
	indexTag      = 'x'
	checkpointTag = 'c'

	// expiryLen is the size of the expiry that prefixes every stored value
	// and follows the tag of every index key.
	expiryLen = 8

	checkpointVersion = 1
	// checkpointVersionAbove: a checkpoint carrying offsets completed above
	// its Next (written only then; see encodeCheckpoint).
	checkpointVersionAbove = 2
	checkpointLen          = 1 + 8 + 8
)

// metaVersionKey holds the store's format version; it sits outside every
// partition's prefix ("m/" < "p/").
var metaVersionKey = []byte("m/version")

// formatVersion is the format of a database: its key layout (above) and
// the layout of the values its users write. 2: the attribution processors
// keep one key per click and per install; the store's own keys
// are as in 1.
const formatVersion = 3

// formatIndexed is format 3 with the expiry index persisted under x/:
// opening such a database drops those keys (dropIndexes) and records
// format 3.
const formatIndexed = 2

// partitionPrefix returns the partition prefix p/<topic>/<partition>/ that
// key starts with.
func partitionPrefix(key []byte) ([]byte, bool) {
	if !bytes.HasPrefix(key, []byte("p/")) {
		return nil, false
	}
	i := bytes.IndexByte(key[2:], '/')
	if i < 0 || len(key) < 2+i+1+4+1 || key[2+i+1+4] != '/' {
		return nil, false
	}
	n := 2 + i + 1 + 4 + 1
	return append([]byte(nil), key[:n]...), true
}

// keyspace builds the keys of one partition.
type keyspace struct {
	prefix []byte // p/<topic>/<partition be32>/
}

func newKeyspace(topic string, partition int32) keyspace {
	p := make([]byte, 0, 2+len(topic)+1+4+1)
	p = append(p, "p/"...)
	p = append(p, topic...)
	p = append(p, '/')
	p = binary.BigEndian.AppendUint32(p, uint32(partition))
	p = append(p, '/')
	return keyspace{prefix: p}
}

// end is the exclusive upper bound of the partition's keys: the prefix with
// its final '/' replaced by the next byte.
func (ks keyspace) end() []byte {
	e := append([]byte(nil), ks.prefix...)
	e[len(e)-1]++
	return e
}

func appendTagged[K string | []byte](dst []byte, ks keyspace, tag byte, key K) []byte {
	dst = append(dst, ks.prefix...)
	dst = append(dst, tag, '/')
	return append(dst, key...)
}

// entry appends the key of the entry of user key key to dst.
func entry[K string | []byte](dst []byte, ks keyspace, key K) []byte {
	return appendTagged(dst, ks, entryTag, key)
}

// checkpointKey appends the key of stage's checkpoint to dst.
func checkpointKey(dst []byte, ks keyspace, stage string) []byte {
	return appendTagged(dst, ks, checkpointTag, stage)
}

// expiryNanos maps an expiry time to the stored form: 0 for none (zero
// time), otherwise unix nanoseconds clamped to [1, MaxInt64] so that
// big-endian order is time order.
func expiryNanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Unix() <= 0:
		return 1
	case t.Unix() >= math.MaxInt64/int64(time.Second)-1:
		return math.MaxInt64
	}
	return t.UnixNano()
}

// appendValue appends the stored form of a value: <exp be64><value>.
func appendValue(dst []byte, exp int64, value []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(exp))
	return append(dst, value...)
}

// valueExpiry returns the expiry of an encoded value.
func valueExpiry(enc []byte) int64 { return int64(binary.BigEndian.Uint64(enc)) }

// userValue returns the user's part of an encoded value, capped so that an
// append by the caller cannot write into memory the store shares.
func userValue(enc []byte) []byte { return enc[expiryLen:len(enc):len(enc)] }
