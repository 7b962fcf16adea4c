// Package commit owns the per-partition commit state of a chain: which offsets
// each stage has completed, which offset may be committed to Kafka, and the
// commit metadata that lets every stage resume at its own position after a
// restart or a move to another instance (DESIGN.md "The commit manager";
// invariant I3 of DESIGN.md "Invariants").
//
// It knows nothing about Kafka clients: offsets are int64, metadata is a
// string, and the caller (the chain's committer adapter) talks to the broker.
//
// # Tracker: contiguous completion
//
// A [Tracker] follows one stage of one partition. The stage begins records in
// strictly increasing offset order (offsets may have gaps: compaction,
// transaction markers — a gap is simply never begun) and completes them in any
// order. Its position is the smallest begun offset that is not completed; every
// offset below the position is either completed or a gap. The position never
// decreases, and it never passes an incomplete begun offset: that is what makes
// it safe to commit even when records complete out of order (key-parallel
// processing). Each begun record carries an int64 meta (the chain stores the
// stage's prefix-max event-time watermark there); the tracker reports the meta
// of the last record of the completed prefix.
//
// Memory is bounded by the window given to [NewTracker] (DESIGN.md I9): at most
// window records may be begun and not yet covered by the position. A record
// completed out of order keeps its slot until every record before it has
// completed, so a slow record at the head blocks new Begins once the window is
// full (head-of-line bound). The slot ring holds strictly increasing offsets;
// Complete finds a slot in O(1) when offsets are dense and by binary search
// (O(log window)) otherwise; Begin and Complete allocate nothing unless they
// return a misuse error. [Tracker.BeginCompleted] is Begin and Complete of
// one offset in one call, for a caller that runs a record to completion
// before beginning the next (one critical section per record).
//
// Offsets completed above the position: [Tracker.AppendCompletedAbove]
// reports the completed records behind an incomplete one that a checkpoint
// may carry — only those whose key (given to [Tracker.BeginKey]) has no
// incomplete record begun before them, so the set is closed under
// reads-from (a record that read an incomplete record's state is not
// carried without it). [Tracker.SetCompletedAbove] restores a carried set
// at start ([Tracker.PreCompleted]: begin those with BeginCompleted, without
// processing them); [Tracker.Abandon] gives up a begun record that a stop
// drops; [Tracker.SetSpan] limits begins so the set always fits the
// metadata.
//
// # Manager: what to commit
//
// A [Manager] holds one partition's commit state for one group generation
// (one assignment). Given every stage's [Checkpoint] it returns the offset to
// commit — the minimum of the stages' positions — and the metadata to commit
// with it. It guards I3: the committed offset never exceeds any stage's
// position (it is their minimum), and it never moves backwards within a
// generation; no stage's position may fall below the last committed offset or
// below its own position in the last committed metadata ([ErrRegression]).
//
// # Metadata format
//
// [EncodeMetadata] writes, and [DecodeMetadata] reads, version 1 of the commit
// metadata. Grammar (ABNF, RFC 5234; literals are case-sensitive here):
//
//	metadata  = %s"dfl1:" hash ":" stage *( "," stage )
//	hash      = 8HEXLC          ; see below, zero-padded lowercase hex
//	stage     = delta [ "." watermark ]
//	delta     = b36             ; stage position minus the committed offset (>= 0)
//	watermark = [ "-" ] b36nz   ; event-time watermark, unix nanoseconds; omitted when 0
//	b36       = "0" / b36nz
//	b36nz     = NZ36 *D36       ; base 36, no leading zeros, fits in int64
//	D36       = %x30-39 / %x61-7A          ; 0-9 a-z
//	NZ36      = %x31-39 / %x61-7A          ; 1-9 a-z
//	HEXLC     = %x30-39 / %x61-66          ; 0-9 a-f
//
// There is exactly one stage entry per configured stage, in configured order.
// hash is the 32-bit FNV-1a of, for each stage name in order, the name's
// length as a uvarint followed by its bytes, then the committed offset as 8
// bytes big-endian. It binds the metadata to the stage list and to the offset
// it was committed with, so metadata from a different chain configuration, or
// left next to an offset that was reset by a tool, is rejected rather than
// misread. The encoding is canonical: the decoder accepts exactly the strings
// the encoder produces. Encoded metadata never exceeds [MaxMetadataLen] bytes;
// any list of at most [MaxStages] stages always fits.
//
// Example: committed offset 1000; click at 1042 with watermark
// 2026-11-29T10:00:00Z (1795946400000000000 ns), install at 1003 with no
// watermark, purchase at 1000 with watermark -1:
//
//	dfl1:3fb71d28:16.dn7lv69i2v40,3,0.-1
//
// Version 2 ([EncodeState], [DecodeState]) adds the changelog offset of a
// chain whose state has a changelog (DESIGN.md "State that follows its partition"): the partition's state at the
// committed positions is exactly its changelog's records below that offset.
//
//	metadata2 = %s"dfl2:" hash ":" stage *( "," stage ) ";c" b36
//
// with hash and stages as in version 1 (the hash does not cover the changelog
// offset). A chain without a changelog keeps writing version 1. Sections
// after the stages are tagged (";c") so that a later version can add one
// (version 3's above sections); the decoder accepts no section it does not know, since a reader that ignored
// one would resume in the wrong place.
//
// Version 3 adds the offsets each stage completed above its position
// ([Checkpoint].Above; the alternative of DESIGN.md "The commit manager" to draining until every
// stage's completed set is contiguous). It is written only when some stage
// has such offsets; otherwise versions 1 and 2 are written byte for byte as
// before.
//
//	metadata3 = %s"dfl3:" hash ":" stage *( "," stage ) [ ";c" b36 ] 1*above
//	above     = ";a" b36 "=" ( runs / bitmap )  ; stage index, increasing
//	runs      = "r" run *( "." run )
//	run       = b36 [ "_" b36nz ]   ; start − base, then length − 1
//	bitmap    = "b" 1*B64URL        ; unpadded; bit i (LSB first) = Next + i
//
// The set holds offsets at or above Next (Next itself when a stage restored
// with a set has not read that record again yet). A run's base is Next for
// the first run and the previous run's last
// offset + 2 after it (runs are maximal); a bitmap's last byte is not zero;
// the shorter of the two is written (runs on a tie). A set is never
// truncated: [MaxAboveSpan] is the span from the position within which
// every stage's set always fits, and a stage must not begin an offset
// further above its position ([Tracker.SetSpan]; 1,400 offsets for 3
// stages; 0 from 22 stages on, whose chains cannot carry sets).
//
// Version 4 adds the idle releases the chain decided at the live tail from
// its own clock, which a replay could not derive from the log ([IdleRelease];
// DESIGN.md "Recorded idle releases"). It is written only when the state
// carries some; otherwise versions 1 to 3 are written byte for byte as
// before.
//
//	metadata4 = %s"dfl4:" hash ":" stage *( "," stage ) [ ";c" b36 ] *above 1*idle
//	idle      = ";i" b36 "=" b36 "." b36 [ "." watermark ]
//	            ; follower stage index, After − committed offset,
//	            ; LeaderNext − After − 1, the leader's watermark
//
// The releases are in increasing After, each at or above the committed
// offset; at most [IdleReleaseCap] of them ([MaxIdleReleases] = 4 up to 27
// stages), and [MaxAboveSpan] keeps their room free of above sets, so the
// metadata still never exceeds [MaxMetadataLen].
//
// Compatibility promise: a "dfl1:", "dfl2:", "dfl3:" or "dfl4:" string is never reinterpreted. A change of
// format gets a new version tag, and later versions of this package keep
// decoding versions 1 to 4. Anything the decoder does not accept — empty metadata,
// metadata written by another program, an unknown version, a garbled string,
// a different stage list or offset — decodes as ok=false, never as an error or
// a panic; the caller then starts every stage at the committed offset, which
// reprocesses but never skips a record.
//
// # Concurrency
//
// [Tracker] and [Manager] are not safe for concurrent use: their owner (the
// partition's chain) serialises every call, e.g. under the mutex that guards
// the stage's state. [EncodeMetadata], [DecodeMetadata] and [ValidateStages]
// are pure functions and may be called from any goroutine.
package commit
