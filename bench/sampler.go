package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SampleInterval is how often the system is sampled during a cell.
const SampleInterval = 100 * time.Millisecond

// Sample is the system's state at one instant of a cell: page-cache dirt and
// writeback (pages, gauges), swap and major-fault counts since the previous
// sample, and pressure stall information (avg10 in %, and the growth of the
// stall total in µs since the previous sample).
type Sample struct {
	UnixNs           int64   `json:"unixNs"`
	NrDirtyPages     int64   `json:"nrDirty"`
	NrWritebackPages int64   `json:"nrWriteback"`
	PswpIn           int64   `json:"pswpin"`
	PswpOut          int64   `json:"pswpout"`
	PgMajFault       int64   `json:"pgmajfault"`
	IOSomeAvg10      float64 `json:"ioSomeAvg10"`
	IOFullAvg10      float64 `json:"ioFullAvg10"`
	MemSomeAvg10     float64 `json:"memSomeAvg10"`
	MemFullAvg10     float64 `json:"memFullAvg10"`
	IOSomeStallUs    int64   `json:"ioSomeStallUs"`
	IOFullStallUs    int64   `json:"ioFullStallUs"`
	MemSomeStallUs   int64   `json:"memSomeStallUs"`
	MemFullStallUs   int64   `json:"memFullStallUs"`
}

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
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return some, full, fmt.Errorf("pressure line %q", sc.Text())
			}
			var perr error
			switch k {
			case "avg10":
				p.Avg10, perr = strconv.ParseFloat(v, 64)
			case "avg60":
				p.Avg60, perr = strconv.ParseFloat(v, 64)
			case "avg300":
				p.Avg300, perr = strconv.ParseFloat(v, 64)
			case "total":
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
	if err := sc.Err(); err != nil {
		return some, full, err
	}
	if !seen {
		return some, full, fmt.Errorf("pressure: no \"some\" line")
	}
	return some, full, nil
}

// rawSample is what one read of the /proc files gives.
type rawSample struct {
	at               time.Time
	vm               map[string]int64
	ioSome, ioFull   PSI
	memSome, memFull PSI
}

// ProcFiles are the files the sampler reads (tests point them elsewhere).
type ProcFiles struct{ Vmstat, PressureIO, PressureMemory string }

// DefaultProcFiles are the real ones.
var DefaultProcFiles = ProcFiles{Vmstat: "/proc/vmstat", PressureIO: "/proc/pressure/io", PressureMemory: "/proc/pressure/memory"}

func readRaw(files ProcFiles) (rawSample, error) {
	s := rawSample{at: time.Now()}
	f, err := os.Open(files.Vmstat)
	if err != nil {
		return s, err
	}
	s.vm, err = ParseVmstat(f)
	f.Close()
	if err != nil {
		return s, err
	}
	// PSI may be absent (kernel without CONFIG_PSI or psi=0): zeros then.
	if f, err := os.Open(files.PressureIO); err == nil {
		s.ioSome, s.ioFull, _ = ParsePressure(f)
		f.Close()
	}
	if f, err := os.Open(files.PressureMemory); err == nil {
		s.memSome, s.memFull, _ = ParsePressure(f)
		f.Close()
	}
	return s, nil
}

// toSample turns cur into a Sample, counters as the growth since prev.
func toSample(prev, cur rawSample) Sample {
	d := func(k string) int64 { return cur.vm[k] - prev.vm[k] }
	return Sample{UnixNs: cur.at.UnixNano(), NrDirtyPages: cur.vm["nr_dirty"], NrWritebackPages: cur.vm["nr_writeback"],
		PswpIn: d("pswpin"), PswpOut: d("pswpout"), PgMajFault: d("pgmajfault"),
		IOSomeAvg10: cur.ioSome.Avg10, IOFullAvg10: cur.ioFull.Avg10, MemSomeAvg10: cur.memSome.Avg10, MemFullAvg10: cur.memFull.Avg10,
		IOSomeStallUs: cur.ioSome.TotalUs - prev.ioSome.TotalUs, IOFullStallUs: cur.ioFull.TotalUs - prev.ioFull.TotalUs,
		MemSomeStallUs: cur.memSome.TotalUs - prev.memSome.TotalUs, MemFullStallUs: cur.memFull.TotalUs - prev.memFull.TotalUs}
}

// Sampler samples the system every interval until Stop.
type Sampler struct {
	stop    chan struct{}
	done    sync.WaitGroup
	mu      sync.Mutex
	samples []Sample
	err     error
}

// StartSampler starts sampling files every interval.
func StartSampler(files ProcFiles, interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{})}
	prev, err := readRaw(files)
	if err != nil {
		s.err = err
		close(s.stop)
		return s
	}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			cur, err := readRaw(files)
			s.mu.Lock()
			if err != nil {
				s.err = err
			} else {
				s.samples = append(s.samples, toSample(prev, cur))
				prev = cur
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// Stop ends the sampling and returns the samples (and the first error).
func (s *Sampler) Stop() ([]Sample, error) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.err
}
