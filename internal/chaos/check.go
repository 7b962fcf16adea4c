package chaos

import (
	"github.com/IBM/sarama"

	"github.com/differential-dev/differential/chain"
	"github.com/differential-dev/differential/processors/attribution"
	"github.com/differential-dev/differential/processors/attribution/reference"
)

// Checker judges what a run wrote — outputs and dead letters read back
// read_committed, by partition in offset order — against the reference
// model of the input, accepting the repeats g allows.
type Checker func(inputs [][]chain.Record, cfg attribution.Config, outputs, deadLetters map[int32][]*sarama.ConsumerMessage, g Guarantee) Verdict

// Verdict is a Checker's answer, counted per input record.
type Verdict struct {
	OK bool
	// Summary is one line when OK, else the counts and the first problems.
	Summary string
	// Installs and purchases the model prescribes and were written (first
	// copies equal to the model's), and the dead letters likewise.
	Outputs, DeadLetters int
	// Missing: prescribed outputs and dead letters never written.
	// Mismatched: first copies that differ from the model's; Unexpected:
	// written for an input that has none.
	Missing, Mismatched, Unexpected int
	// Repeats after the first copy: byte-identical, or not (never accepted).
	IdenticalDuplicates, ConflictingDuplicates int
}

// ReferenceCheck is the Checker of processors/attribution/reference: every
// output and dead letter must be the model's, nothing may be missing, one
// key's outputs of a stage must be in input offset order (the attribution
// chain's default key-scoped gate lets a record of one user pass a record of
// another that waits for its own clicks, so a stage's outputs are ordered per
// key, not per partition), and repeats must be byte-identical copies
// (AtLeastOnce) or absent (ExactlyOnce).
func ReferenceCheck(inputs [][]chain.Record, cfg attribution.Config, outputs, deadLetters map[int32][]*sarama.ConsumerMessage, g Guarantee) Verdict {
	o := reference.Options{Duplicates: reference.IdenticalDuplicates, Order: reference.KeyOrder}
	if g == ExactlyOnce {
		o.Duplicates = reference.NoDuplicates
	}
	rep := reference.Check(inputs, cfg, reference.FromKafka(outputs), reference.FromKafka(deadLetters), o)
	outs := rep.Outputs()
	return Verdict{
		OK:                    rep.OK(),
		Summary:               rep.Summary(),
		Outputs:               outs.Matched,
		DeadLetters:           rep.DeadLetters.Matched,
		Missing:               outs.Missing + rep.DeadLetters.Missing,
		Mismatched:            outs.Mismatched + rep.DeadLetters.Mismatched,
		Unexpected:            outs.Unexpected + rep.DeadLetters.Unexpected,
		IdenticalDuplicates:   outs.IdenticalDuplicates + rep.DeadLetters.IdenticalDuplicates,
		ConflictingDuplicates: outs.ConflictingDuplicates + rep.DeadLetters.ConflictingDuplicates,
	}
}
