// Package runfile is mqbench's run file, run.json.gz: its schema (every type
// a run records), the figures derived from a load.Result, the statistics
// over repeats (medians with distribution-free confidence intervals), and
// reading and writing it. It holds no orchestration and no rendering:
// package bench writes run files, package bench/report renders them.
//
// The schema is documented field by field in docs/runfile.md, generated
// from these types by TestRunfileDoc. SchemaVersion changes whenever a
// figure's meaning changes; Read reads schemas 3 and 4 as written (with
// notes) and refuses other schemas with an error that says why.
//
// Files: schema.go (the run file's types), config.go (the configuration
// recorded in it), figures.go (Figures and their derivation), stats.go
// (medians, intervals, separation), io.go (Read, Write).
package runfile
