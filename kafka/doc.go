// Package kafka is the one adapter that binds the chain core (package chain)
// to Kafka through sarama: Run consumes a topic as a member of a consumer
// group and runs a *chain.Chain over every partition the group assigns, and
// Producer is the chain.Producer for outputs and dead letters.
//
// # What it owns
//
// Run owns, for its lifetime, three sarama clients and the consumer group;
// every goroutine it starts (sarama's, the claims', the error logger) has
// returned when Run returns. A Producer owns its own client until Close.
// The chain owns everything per partition (stages, buffer, commit state);
// the adapter only gives it a chain.Assignment per claim. The records it
// hands the chain share sarama's key, value and header bytes; their header
// slices come from shared blocks (one allocation per 512 headers, not one
// per record; each slice capped at its length, so an append copies).
//
// # The client split
//
// sarama keeps one connection per broker per client and answers requests on
// it in order, so a request queued behind a fetch long-poll waits for it.
// Hence one client per job, never shared:
//
//   - group: JoinGroup/SyncGroup/Heartbeat and the claims' fetches. Fetches
//     long-poll at most Config.MaxWaitTime (100 ms by default), which bounds
//     how long a heartbeat — the news of a rebalance — or a close waits.
//   - commits: OffsetCommit and OffsetFetch only (and Run's topic check), so
//     a commit is answered as soon as the coordinator has written it; and
//     the leader probes: every Config.ProbeInterval (1 s) each claim asks
//     its partition's leader for the high watermark (ListOffsets). The
//     claim's Source reports when the leader last answered (a probe or
//     fetched records: chain.LeaderContact) and the higher of the fetched
//     and the probed high watermark; its Committer reports since when a
//     commit waits for the coordinator (chain.CommitPending). A health
//     check tells from these a partition whose leader is gone — nothing
//     fetched, so no lag seen — or whose coordinator does not answer, from
//     an idle one. A probe to a paused broker waits for the client's read
//     timeout; the contact ages meanwhile. Probes end with their claims.
//   - polling: followers that fell behind the handoff buffer read the
//     partition themselves, each with its own Fetch requests at its own
//     offset on this shared client (internal/kfetch: control records and
//     aborted transactions filtered as sarama's consumer does). A reader
//     fetches only when its follower asks, and its follower is behind the
//     leader, so its fetches answer at once instead of long-polling in
//     front of the others; opening one costs no round trip. The claims'
//     end checks go here too (chain.EndConfirmer: before a follower's idle
//     release, and once at a quiet tail for the lag): one Fetch at the
//     offset after the last delivered record that does not wait, with the
//     same filter, so a tail of transaction markers and aborted or open
//     transactions reads as the end, and records the claim has not
//     delivered yet (a stalled fetch) do not. Its high watermark counts as
//     a probe answer.
//   - producer: NewProducer's own client, idempotent with acks=all.
//   - changelog (NewChangelog, for chain.WithChangelog): two clients of its
//     own — an idempotent acks=all producer with explicit partitions (a
//     checkpoint's state changes to changelog partition p for input
//     partition p, in order, acknowledged before the checkpoint persists),
//     and a reader for restores (plain fetches of [from, to), prefetching
//     the next response while the store applies the current one) and end
//     offsets. NewChangelog creates the changelog topic when it is missing
//     (the input's partition count, cleanup.policy=compact,
//     min.compaction.lag.ms one hour) — the only topic the engine creates —
//     and refuses one with more partitions than the input or a deleting
//     cleanup policy (ErrChangelogMismatch). One with fewer partitions is
//     grown to the input's count (CreatePartitions), at NewChangelog and
//     when Partition is asked for an input partition added while the
//     engine runs; the group client sees such partitions within about twice
//     Config.MetadataRefresh and rebalances. Its admin requests are asked again,
//     for up to 30 s, of a broker that cannot be reached or has not learnt
//     of a just-created topic yet.
//   - transactions (NewTransactor, for chain.WithExactlyOnce): a
//     transactional producer (KIP-447, Kafka 2.5+) whose one open
//     transaction per commit cycle holds outputs, dead letters, changelog
//     records and, with AddOffsetsToTxnWithGroupMetadata, the offsets of
//     each partition in the name of the group member that owns it (a
//     member of an older generation is refused). A fenced or failed
//     producer is replaced by a new session (InitProducerId aborts what
//     the old one left open). After a failed commit, ResolveCommit
//     (chain.CommitResolver) settles the transaction and compares the
//     committed offsets, fetched with RequireStable, with the cycle's: the
//     commit may have taken effect although EndTxn's response was lost.
//     With it, Run reads read_committed and fetches
//     committed offsets with RequireStable, and the changelog is always
//     read read_committed.
//
// # Commits
//
// Offsets are never auto-committed and sarama's MarkOffset/Commit are not
// used: Commit returns no error and MarkOffset ignores a new metadata at
// the same offset. The chain's Committer sends an OffsetCommitRequest with
// the session's current generation and member id (read at every commit, as
// a cooperative rebalance changes the generation under a running claim) and
// returns when the coordinator acknowledged it, or its per-partition error.
// Coordinator moves and loads are retried; ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS are not (the member no longer
// owns the partition: the broker refuses, and the next owner resumes from
// the last accepted commit). One table of broker error codes (errors.go)
// answers every such question: whether a session joins again, whether a
// commit is retried, whether a producer was fenced (IsFenced), whether a
// message was refused for its size (then the producer's error wraps
// chain.ErrMessageTooLarge and the chain sends a minimal dead letter). The committed offset is the minimum of the
// stages' positions and the metadata carries every stage's position
// (package commit), so each stage resumes at its own position.
//
// # The rebalance sequence
//
//  1. Join and sync; sarama fetches each claimed partition's committed
//     offset and starts the claim there (Config.Start when none).
//  2. Setup fetches the committed offset and metadata of every claimed
//     partition with one OffsetFetch on the commit client (a claim added by
//     a cooperative rebalance fetches its own in ConsumeClaim).
//  3. ConsumeClaim calls chain.RunPartition with the session's context, a
//     Source over the claim's messages and a Committer for the partition.
//  4. On a rebalance (eager: the session's context ends; cooperative: the
//     revoked claim is closed, which cancels the claim's own context at
//     once — ConsumeClaim watches the claim's Errors channel, which closes
//     at the revoke, while Messages still holds what sarama buffered) or on
//     Run's cancellation, the chain stops fetching, lets begun records
//     finish (up to its shutdown timeout), persists its checkpoints and
//     makes the final commit; RunPartition returns, and only then
//     ConsumeClaim returns.
//  5. sarama rejoins only after every revoked claim returned, so the next
//     owner's offset fetch sees the final commit.
//
// Config.RebalanceTimeout must therefore exceed the chain's shutdown timeout
// plus one commit; otherwise the group may move a partition before its
// final commit (the late commit is then refused as ILLEGAL_GENERATION, and
// the new owner repeats what the old one finished after its last commit).
//
// # Leaving the group
//
// When Run returns, every partition has made its final commit; then a
// dynamic member leaves the group (sarama's Close sends LeaveGroup), so the
// others rejoin at their next heartbeat instead of after the session
// timeout. A static member (Config.InstanceID) does not leave (KIP-345: the
// group keeps it, with its partitions, for a restart within the session
// timeout, which then rebalances nothing) unless Config.LeaveOnStop, which
// removes it by its instance id.
//
// # Standby replicas
//
// With Config.StandbyReplicas a Run also keeps warm copies of partitions it
// does not own (DESIGN.md "Standby replicas"): every Config.StandbyInterval
// it describes the group on the commit client (DescribeGroups), works out
// the partitions it stands by for (rendezvous hashing of the members' keys,
// the owner excluded: every member computes the same placement), fetches
// their committed offsets and metadata, and catches each up to the
// committed changelog offset (chain.Standby, reading with the changelog's
// reader) — unless a partition of its own is still starting
// (chain.Chain.Starting), which goes first. Its subscriptions advertise the partitions it holds warm
// (PreferWarm, a fake entry of the sticky strategy's user data), and a
// leader that wraps its strategy so swaps moved partitions between members
// until each lands on a member holding it warm where the counts allow.
// Nothing here can fail the Run: a failed round is logged and the next one
// tries again; a standby only makes a later restore shorter.
//
// # Guarantees
//
//   - A clean rebalance or stop repeats nothing and loses nothing: every
//     record begun by a stage of the old owner is finished and committed
//     before the partition moves (DESIGN I6, I10).
//   - Run returns nil after a stop through its context, once every
//     partition made its final commit; the first fatal *chain.PartitionError
//     stops every partition the same way and is returned. A partition that
//     hits the shutdown timeout is logged, not fatal: its unfinished records
//     run again at the next owner.
//   - A missing topic, a refused configuration or an authorization failure
//     is returned at once, naming the topic and brokers, not retried.
//   - Producer.Produce calls done exactly once: nil after every message of
//     the call is acknowledged by all in-sync replicas, or the first error.
//     A failed request is retried for about two minutes (DefaultProducerRetries,
//     RetryBackoff), so the loss of a partition leader — replaced after the
//     brokers' 9 s session timeout — delays outputs but fails nothing.
//
// # Secured clusters
//
// Config.Security and ProducerConfig.Security configure TLS (a CA file,
// a client certificate and key, a server name, InsecureSkipVerify, which is
// logged as a warning) and SASL (PLAIN, SCRAM-SHA-256/512 through
// xdg-go/scram, OAUTHBEARER with a token read from a file at every
// connection) on every client Run and NewProducer create; Security.Apply
// does the same for a sarama configuration of one's own. The password is a
// Secret: every printed form of it is "[redacted]". A connection refused
// for TLS or SASL reasons fails Run and NewProducer at once with an error
// that wraps ErrAuthentication and says what to check (ExplainConnect).
//
// # Concurrency
//
// Run may be called several times at once (several members in one
// process), each with its own *chain.Chain. Hooks run on claim goroutines,
// concurrently. A Producer may be shared by any number of chains and
// goroutines.
package kafka
