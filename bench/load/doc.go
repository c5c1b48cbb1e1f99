// Package load drives a workload against an operation and measures it: the
// closed loop (P producers appending as fast as they can) and the open loop
// (arrivals at a target rate, latency measured from the intended start so
// that a slow operation cannot hide the requests it delayed; every arrival
// of the window is served or recorded as unstarted). Around the measured
// window it reads the system's durable position (Durability) and times its
// drain, so throughput can be stated as what became durable. It is a leaf
// package (the standard library, x/sys and hdrhistogram-go) so that the
// peers' own module runs the very same workload definition.
//
// Files: spec.go (Spec, Op, Durability), result.go (Result, the durability
// and saturation figures), run.go (the closed and open loops), schedule.go
// (arrival schedules and clocks), hist.go (HdrHistograms), series.go (the
// latency time series), timer_*.go (the timerfd sleeper), rusage_*.go.
package load
