// Package host describes the machine and the devices a benchmark runs on
// (from /proc, /sys and mountinfo) and samples the system during a cell
// (/proc/vmstat, PSI, load average, steal), and builds the emulated HDD
// (internal/hddfs under a loop device, calibrated with fio).
package host
