package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// fioOutput is the part of fio's --output-format=json that mqbench reads.
type fioOutput struct {
	FioVersion string `json:"fio version"`
	Jobs       []struct {
		Error int `json:"error"`
		Write struct {
			IOBytes int64   `json:"io_bytes"`
			BWBytes float64 `json:"bw_bytes"`
			IOPS    float64 `json:"iops"`
			Runtime int64   `json:"runtime"` // ms
			LatNs   fioLat  `json:"lat_ns"`
		} `json:"write"`
		Sync struct {
			LatNs fioLat `json:"lat_ns"`
		} `json:"sync"`
	} `json:"jobs"`
}

type fioLat struct {
	N          int64              `json:"N"`
	Mean       float64            `json:"mean"`
	Max        float64            `json:"max"`
	Percentile map[string]float64 `json:"percentile"`
}

func (l fioLat) at(p float64) int64 {
	return int64(l.Percentile[strconv.FormatFloat(p, 'f', 6, 64)])
}

// parseFio reads fio's JSON (fio may print warnings before it).
func parseFio(out []byte) (*fioOutput, error) {
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var o fioOutput
	if err := json.Unmarshal(out, &o); err != nil {
		return nil, fmt.Errorf("fio: parse JSON: %w", err)
	}
	if len(o.Jobs) == 0 {
		return nil, fmt.Errorf("fio: no job in the output")
	}
	if o.Jobs[0].Error != 0 {
		return nil, fmt.Errorf("fio: job error %d", o.Jobs[0].Error)
	}
	return &o, nil
}

func fioSeqFigures(o *fioOutput) runfile.Figures {
	w := o.Jobs[0].Write
	return runfile.Figures{MBPerSec: w.BWBytes / 1e6, MsgsPerSec: w.IOPS}
}

// fioSyncFigures: fdatasync latency percentiles (fio times the fdatasync
// alone); msgs/s is durable 4 KiB appends per second, 1 / (mean write +
// mean fdatasync).
func fioSyncFigures(o *fioOutput) runfile.Figures {
	j := o.Jobs[0]
	s := j.Sync.LatNs
	f := runfile.Figures{P50Ns: s.at(50), P90Ns: s.at(90), P99Ns: s.at(99), P999Ns: s.at(99.9), P9999Ns: s.at(99.99), MaxNs: int64(s.Max)}
	if per := j.Write.LatNs.Mean + s.Mean; per > 0 {
		f.MsgsPerSec = 1e9 / per
		f.MBPerSec = f.MsgsPerSec * 4096 / 1e6
	}
	return f
}

// fioLimits runs the fio equivalents of the device probes when fio is on PATH.
func (r *runner) fioLimits(ctx context.Context) {
	path, err := exec.LookPath("fio")
	seqArgs := []string{"--name=mqbench-seq", "--directory=" + r.work, "--rw=write", "--bs=1M", "--direct=1",
		"--ioengine=io_uring", "--iodepth=32", "--size=" + strconv.FormatInt(r.cfg.DeviceProbeBytes, 10),
		"--unlink=1", "--output-format=json"}
	syncArgs := []string{"--name=mqbench-sync", "--directory=" + r.work, "--rw=write", "--bs=4k", "--ioengine=psync",
		"--fdatasync=1", "--size=" + strconv.Itoa(r.cfg.SyncProbeCount*4096), "--unlink=1", "--output-format=json"}
	for _, job := range []struct {
		name    string
		size    int
		args    []string
		figures func(*fioOutput) runfile.Figures
	}{{runfile.LimitFioSeq, 1 << 20, seqArgs, fioSeqFigures}, {runfile.LimitFioSync, 4096, syncArgs, fioSyncFigures}} {
		l := runfile.Limit{Name: job.name, Tool: "fio", SizeBytes: job.size, Dir: r.work, Params: map[string]string{"args": strings.Join(job.args, " ")}}
		if err != nil {
			l.Status, l.Reason = runfile.StatusSkipped, "fio is not on PATH"
			r.file.Limits = append(r.file.Limits, l)
			r.progress.advance(r.cfg.Repeat) // its planned runs
			r.progress.cellDone("limit "+l.Name, l.Status, l.Reason)
			continue
		}
		r.repeatLimit(ctx, &l, func() (runfile.Figures, error) {
			out, err := exec.CommandContext(ctx, path, job.args...).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					return runfile.Figures{}, fmt.Errorf("fio %s: %w: %s", job.name, err, strings.TrimSpace(string(ee.Stderr)))
				}
				return runfile.Figures{}, fmt.Errorf("fio %s: %w", job.name, err)
			}
			o, err := parseFio(out)
			if err != nil {
				return runfile.Figures{}, err
			}
			l.Params["fioVersion"] = o.FioVersion
			return job.figures(o), nil
		})
	}
}
