// Package differential is the short way to embed the engine: one call runs
// a chain of stages over a Kafka topic as a consumer-group member, with the
// state store, the producer of outputs, the changelog and exactly-once
// transactions wired from a few settings.
//
//	err := differential.Run(ctx, differential.Config{
//		Brokers: []string{"localhost:9092"}, Topic: "events", Group: "payments", Output: "paid",
//	}, differential.TypePrefix(":"),
//		differential.On("order", orders),
//		differential.On("payment", payments))
//
// Four ideas cover the common case: a Config, a decoder that gives every
// record a type (TypePrefix, or any chain.Decoder), a Handler per event
// type (On), and the chain.Context a handler reads state from and emits
// outputs through. Each stage sees an event of its type only after every
// earlier stage has processed the records before it (and, for event time,
// those up to the chain's lateness): the payment stage always finds the
// order the order stage stored.
//
// What it owns: nothing that outlives Run — the store, producers and
// changelog it opens are closed when Run returns, after every partition's
// final commit. It guarantees what the parts do (README "Guarantees"): each
// stage sees the records before it processed by the earlier stages, and
// every output at least once (exactly once to read_committed readers with
// ExactlyOnce).
//
// The parts stay available for what Run does not cover: chain.New with its
// options, kafka.Run and kafka.Config, store.OpenPebble, kafka.Producer,
// kafka.Transactor and kafka.Changelog (docs/library.md). Config.Options
// passes chain options through; Config.Kafka is the base of the group's
// configuration.
package differential
