// Package bench measures the chain engine against two micro-batch designs
// — the strongest micro-batch (per-key order, no linger, one synced
// checkpoint batch, background commits, its batch size swept in the same
// run) and the micro-batch baseline of DESIGN.md ("The micro-batch
// baseline") — on the same broker, input, processors, decoder, state
// store, producer and worker cap, in steady state, and checks in every
// reported run that each design produces exactly what the reference model
// prescribes. Run returns a Report; Report.WriteTable prints it, and its
// JSON form holds every figure. The CLI's `differential bench` calls Run;
// its flags map one to one to Options. EOSCost measures the exactly-once
// cost table instead, and HeavyKey the per-record cost of a heavy key.
// Workload B's runs also measure its CPU floor and the bound it sets
// (CPUFloor; FloorOnly: that alone) and, with Options.Cores, how the chain
// and the strongest micro-batch scale with GOMAXPROCS (CoresPoint).
//
// docs/benchmark.md describes the designs, the workloads, how runs are
// sized and measured, the bounds, the latency floors, the cost waits and
// the correctness check, with the current figures and the commands that
// re-measure them.
//
// Run may be called concurrently: runs share nothing, and every topic and
// group name is unique per run, so they may also share a real cluster (the
// measurements then disturb each other). Everything Run starts has stopped,
// and its topics are deleted, when it returns.
package bench
