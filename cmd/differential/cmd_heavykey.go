package main

import (
	"context"

	"github.com/differential-dev/differential/bench"
)

const heavyKeySynopsis = `Measures what a record costs the attribution processors and the Pebble store
when one key (the all-zeros advertising ID) has --share of its partition's
records and thousands of events inside the windows, against the other keys'
records: per record type, the mean, p50 and p99 CPU time of the heavy key's
records, of the other keys of its partition and of the other partitions.
No broker: the records go through the three stages on one thread, in log
order, with a checkpoint every --commit-every records, and the heavy
partition's outputs are checked against the reference model (exit 1 if they
differ). Progress goes to stderr, the report to stdout.`

// heavyKeyCmd is `differential heavykey`.
func heavyKeyCmd(ctx context.Context, args []string, e *env) error {
	var o bench.HeavyKeyOptions
	fs := newFlagSet("heavykey", heavyKeySynopsis, e)
	fs.IntVar(&o.Records, "records", 1_000_000, "records of the workload")
	fs.IntVar(&o.Partitions, "partitions", 8, "partitions of the workload")
	fs.Float64Var(&o.Share, "share", 0.3, "the heavy key's share of its partition's records, in (0, 1)")
	fs.Uint64Var(&o.Seed, "seed", 1, "workload seed")
	fs.IntVar(&o.CommitEvery, "commit-every", 10_000, "records between checkpoints")
	fs.StringVar(&o.Dir, "dir", "", "`directory` for the Pebble store (default the system's temporary directory)")
	fs.BoolVar(&o.NoVerify, "no-verify", false, "skip the check against the reference model")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return &usageError{err}
	}
	o.Progress = e.stderr
	rep, err := bench.HeavyKey(ctx, o)
	return benchDone(e, rep != nil && len(rep.Classes) > 0, rep.WriteTable, err, "the outputs differ from the reference model")
}
