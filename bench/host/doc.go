// Package host describes the machine and the devices a benchmark runs on
// (from /proc, /sys and mountinfo) and samples the system during a cell
// (/proc/vmstat, PSI, load average, steal).
package host
