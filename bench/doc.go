// Package bench is mqstore's benchmark harness: it runs the matrix of
// backend × message size × flush policy × pressure × target directory
// (and the peer stores beside it), repeats every cell in interleaved,
// shuffled rounds after an unmeasured warm round, measures the limits
// beside the store (device probes, fio, the group-commit limit) and the
// load generator's own floor, and writes a results directory that package
// report renders.
//
// What a user reads first is the answer (report: "What to run"): per
// device, the backend and flush policy for an acknowledgement that means
// durable and for one that may mean in memory, with the interval that
// decided it. Every figure behind it obeys the harness's rules: throughput
// is what became durable in the window; open-loop latency is from the
// intended start, every arrival kept; tails come from the merged
// histogram of all repeats, with their sample counts; a cell is
// generator-bound only when its service time is within the floor's tail;
// a pressure gate decides only what the bounds allow.
//
// Packages: load (the closed and open loops, histograms, the peer
// protocol), runfile (run.json: the schema, figures, intervals, tails),
// report (summary.md, plots, bench.txt, the recommendations), device (the
// device probes), host (the machine's and devices' description, the
// emulated HDD, the system sampler), peers (a separate module: pebble and NATS through the
// mqpeer command). System changes (sysctls, swap, cgroups v1 and v2, loop
// devices, mounts) go through internal/hostctl, which journals and undoes
// them.
package bench
