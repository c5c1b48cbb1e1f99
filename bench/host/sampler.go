package host

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/bench/runfile"
)

// SampleInterval is how often the system is sampled during a cell.
const SampleInterval = 100 * time.Millisecond

// Sample is the system at one instant of a repeat (runfile.Sample).
type Sample = runfile.Sample

// ParseVmstat reads /proc/vmstat's "name value" lines.
func ParseVmstat(r io.Reader) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("vmstat %q: %w", sc.Text(), err)
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}

// PSI is one line of a /proc/pressure file.
type PSI struct {
	Avg10, Avg60, Avg300 float64
	TotalUs              int64
}

// ParsePressure reads a /proc/pressure/{io,memory,cpu} file: its "some" and
// "full" lines (full is zero when the file has none, as for cpu on old
// kernels).
func ParsePressure(r io.Reader) (some, full PSI, err error) {
	sc := bufio.NewScanner(r)
	seen := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		var p PSI
		avgs := map[string]*float64{"avg10": &p.Avg10, "avg60": &p.Avg60, "avg300": &p.Avg300}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return some, full, fmt.Errorf("pressure line %q", sc.Text())
			}
			var perr error
			if avg := avgs[k]; avg != nil {
				*avg, perr = strconv.ParseFloat(v, 64)
			} else if k == "total" {
				p.TotalUs, perr = strconv.ParseInt(v, 10, 64)
			}
			if perr != nil {
				return some, full, fmt.Errorf("pressure line %q: %w", sc.Text(), perr)
			}
		}
		switch f[0] {
		case "some":
			some, seen = p, true
		case "full":
			full = p
		}
	}
	if err = sc.Err(); err == nil && !seen {
		err = fmt.Errorf("pressure: no \"some\" line")
	}
	return some, full, err
}

// rawSample is what one read of the /proc files gives.
type rawSample struct {
	at               time.Time
	vm               map[string]int64
	ioSome, ioFull   PSI
	memSome, memFull PSI
	load1            float64
	cpu              CPUTimes
}

// ProcFiles are the files the sampler reads (tests point them elsewhere).
type ProcFiles struct{ Vmstat, PressureIO, PressureMemory, LoadAvg, Stat string }

// DefaultProcFiles are the real ones.
var DefaultProcFiles = ProcFiles{Vmstat: "/proc/vmstat", PressureIO: "/proc/pressure/io", PressureMemory: "/proc/pressure/memory",
	LoadAvg: "/proc/loadavg", Stat: "/proc/stat"}

// CPUTimes are the first ("cpu") line of /proc/stat, in clock ticks.
type CPUTimes struct{ Total, Steal int64 }

// ParseProcStat reads the total and steal ticks of /proc/stat's cpu line.
func ParseProcStat(r io.Reader) (CPUTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var t CPUTimes
		for i, v := range f[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return t, fmt.Errorf("/proc/stat cpu line %q: %w", sc.Text(), err)
			}
			if i < 8 { // user nice system idle iowait irq softirq steal; guest time is inside user
				t.Total += n
			}
			if i == 7 {
				t.Steal = n
			}
		}
		return t, nil
	}
	return CPUTimes{}, fmt.Errorf("/proc/stat: no cpu line")
}

// ParseLoadAvg reads /proc/loadavg's 1-minute average.
func ParseLoadAvg(b []byte) (float64, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("loadavg %q", b)
	}
	return strconv.ParseFloat(f[0], 64)
}

func readRaw(files ProcFiles) (rawSample, error) {
	s := rawSample{at: time.Now()}
	b, err := os.ReadFile(files.Vmstat)
	if err == nil {
		s.vm, err = ParseVmstat(bytes.NewReader(b))
	}
	if err != nil {
		return s, err
	}
	// PSI may be absent (kernel without CONFIG_PSI or psi=0): zeros then.
	if b, err := os.ReadFile(files.PressureIO); err == nil {
		s.ioSome, s.ioFull, _ = ParsePressure(bytes.NewReader(b))
	}
	if b, err := os.ReadFile(files.PressureMemory); err == nil {
		s.memSome, s.memFull, _ = ParsePressure(bytes.NewReader(b))
	}
	if b, err := os.ReadFile(files.LoadAvg); err == nil {
		s.load1, _ = ParseLoadAvg(b)
	}
	if b, err := os.ReadFile(files.Stat); err == nil {
		s.cpu, _ = ParseProcStat(bytes.NewReader(b))
	}
	return s, nil
}

// toSample turns cur into a Sample, counters as the growth since prev.
func toSample(prev, cur rawSample) Sample {
	d := func(k string) int64 { return cur.vm[k] - prev.vm[k] }
	return Sample{UnixNs: cur.at.UnixNano(), IntervalNs: cur.at.Sub(prev.at).Nanoseconds(), NrDirtyPages: cur.vm["nr_dirty"], NrWritebackPages: cur.vm["nr_writeback"],
		PswpIn: d("pswpin"), PswpOut: d("pswpout"), PgMajFault: d("pgmajfault"),
		IOSomeAvg10: cur.ioSome.Avg10, IOFullAvg10: cur.ioFull.Avg10, MemSomeAvg10: cur.memSome.Avg10, MemFullAvg10: cur.memFull.Avg10,
		IOSomeStallUs: cur.ioSome.TotalUs - prev.ioSome.TotalUs, IOFullStallUs: cur.ioFull.TotalUs - prev.ioFull.TotalUs,
		MemSomeStallUs: cur.memSome.TotalUs - prev.memSome.TotalUs, MemFullStallUs: cur.memFull.TotalUs - prev.memFull.TotalUs,
		Load1: cur.load1, StealPct: stealPct(prev.cpu, cur.cpu)}
}

func stealPct(prev, cur CPUTimes) float64 {
	if d := cur.Total - prev.Total; d > 0 {
		return 100 * float64(cur.Steal-prev.Steal) / float64(d)
	}
	return 0
}

// Sampler samples the system every interval until Stop.
type Sampler struct {
	stop    context.CancelFunc
	done    sync.WaitGroup // Stop reads samples and err after it
	samples []Sample
	err     error
}

// StartSampler starts sampling files every interval.
func StartSampler(files ProcFiles, interval time.Duration) *Sampler {
	ctx, stop := context.WithCancel(context.Background())
	s := &Sampler{stop: stop}
	prev, err := readRaw(files)
	if err != nil {
		s.err = err
		return s
	}
	s.done.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur, err := readRaw(files)
			if err != nil {
				if s.err == nil {
					s.err = err
				}
			} else {
				s.samples = append(s.samples, toSample(prev, cur))
				prev = cur
			}
		}
	})
	return s
}

// Stop ends the sampling and returns the samples (and the first error).
func (s *Sampler) Stop() ([]Sample, error) {
	s.stop()
	s.done.Wait()
	return s.samples, s.err
}
