package load

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// StartProfiles (for the peers' processes, which profile themselves) starts a CPU profile and block and mutex sampling, written to
// dir/<name>.{cpu,heap,block,mutex}.pprof by the returned stop. An empty dir
// profiles nothing.
func StartProfiles(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	base := filepath.Join(dir, name)
	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		_ = cpu.Close()
		return nil, fmt.Errorf("profiles: start cpu profile: %w", err)
	}
	runtime.SetBlockProfileRate(10_000) // one blocking event per 10 µs blocked
	runtime.SetMutexProfileFraction(10)
	return func() error {
		pprof.StopCPUProfile()
		errs := []error{cpu.Close()}
		for _, p := range []string{"heap", "block", "mutex"} {
			errs = append(errs, writeProfile(p, base+"."+p+".pprof"))
		}
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("profiles: %w", err)
		}
		return nil
	}, nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = pprof.Lookup(name).WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WindowProfiles is StartProfiles for the measured window alone: window is
// a Spec.Window that starts the profiles as the window opens and stops them
// at its end (not the warm-up, nor the merge of the histograms after it),
// and errs returns what starting or stopping them failed with. An empty dir
// profiles nothing.
func WindowProfiles(dir, name string) (window func() (end func()), errs func() error) {
	var err error
	window = func() func() {
		stop, serr := StartProfiles(dir, name)
		if serr != nil {
			err = serr
			return func() {}
		}
		return func() { err = stop() }
	}
	return window, func() error { return err }
}
