// Package buffer is the per-partition handoff buffer of the chain (DESIGN.md
// "Buffered hand-off with a polling fallback").
//
// # What it owns
//
// A Ring owns an array of at most capacity items (records fetched once from
// Kafka by the partition's fetcher; it starts small and doubles while the
// ring must hold more, so readers that keep up keep it small), the offset range [Low, High) they cover,
// the pacer's cursor, and the wake-up channels of the goroutines waiting on
// it. It does not own the records' byte slices (it copies the items, not what
// they point to), the readers' cursors, or polling: a reader that falls out of
// the ring fetches from Kafka itself (that logic is in the chain).
//
// Items can also be built where they stay (Reserve hands the writer the free
// slots after the last item, Commit publishes those it filled) and the pacer
// can read them where they are (View returns the ring's own slots, valid
// until its next read): the chain's fetcher decodes every record straight
// into its slot, and a one-stage chain's only stage reads it there, so an
// item is written once and copied only into the batches of readers behind
// the pacer.
//
// # Invariant
//
// The ring's items are exactly the fetched records with offsets in
// [Low, High), minus the offsets Kafka never returned (gaps from compaction
// or transaction markers), in increasing offset order, and there are never
// more than capacity of them (DESIGN I9). Low never decreases; High never
// decreases. A Read from an offset >= Low returns the items with offset >= from
// in order, so a reader that moves its cursor to last-returned-offset+1 sees
// every fetched offset exactly once (DESIGN I2); a Read from below Low fails
// with ErrEvicted instead of silently skipping.
//
// # When full
//
// One reader, the pacer (the chain's first stage), paces the writer:
// items with offset >= the pacer's cursor are unread, the others are read.
// Append never overwrites an unread item: while the ring holds capacity
// unread items — or the read-ahead limit, LimitReadAhead, if smaller — it
// blocks until the pacer reads on (or ctx ends, or Close),
// and only then — a pacer that starts ahead of the ring (the first stage
// resuming further than the slowest one) has read everything below its
// cursor, so Append evicts and goes on up to it without waiting.
// When the ring is full but some items are read, Append evicts the oldest
// items, as few as the new items need, and Low moves past them. Eviction is
// lazy, so read items stay available to the slower readers as long as the
// space is not needed — unless the caller, which knows every reader's
// cursor, discards what all of them have passed (Discard: the slots are
// zeroed at once, so the records they point to can be collected). The writer never waits for any reader but the pacer;
// a slower reader that is overtaken gets ErrEvicted and polls Kafka until
// Room(cursor) reports it covered again.
//
// # Concurrency contract
//
// One writer goroutine calls Append, or Reserve then Commit, and, when it is
// done, Close (Close may also be called from any other goroutine, e.g. on
// revoke). Reserved slots are the writer's alone until Commit: readers,
// Discard and eviction never touch them, so the writer fills them without
// the lock. Any number of readers call Read, TryRead, Changed and the
// accessors concurrently, each at its own cursor. Exactly one reader passes
// pacer=true (or calls View), and its cursor must not move backwards (the
// ring keeps the largest cursor it was given). A View's slots stay the
// pacer's until its next read: no eviction, discard or growth of the array
// touches them meanwhile; the pacer may write them only when it is the
// ring's only reader.
// Every method takes the ring's one mutex once per call (per batch, not per
// item); waiting happens outside the mutex, on channels that are allocated
// only when someone waits and closed at the next change.
package buffer
