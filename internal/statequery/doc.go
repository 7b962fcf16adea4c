// Package statequery answers GET /state/{key}: a key's attribution state
// (its clicks an install can still use, its installs a purchase can still
// use, its velocity count) read from one snapshot of the partition's
// persisted state, with the positions the snapshot holds.
//
// The key's partition is the input producer's (sarama's default hash
// partitioner: FNV-1a 32 of the key modulo the partition count). A
// partition this member runs and has restored is answered here; one whose
// state is being restored, or whose stages have not started, is answered
// 503 with Retry-After, never from partial state; one another member owns
// is answered 307 to that member's advertised address (Owners), or 503
// when the owner is not known (a rebalance, a member that advertises no
// address).
//
// The snapshot is the state as of the partition's last checkpoint (every
// commit interval): each stage's part of the answer is exactly its state
// after the records below its position, which the answer gives. The
// ownership and restore checks are made before and after the snapshot is
// taken, so a restore that begins in between is answered 503 too.
//
// What it owns: nothing but its configuration; a Handler is safe for
// concurrent use. Authentication is the HTTP server's (httpauth.Guard).
package statequery
