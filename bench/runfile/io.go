package runfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// FileName is the run file a run writes into its directory (gzip'd JSON:
// `zcat run.json.gz | jq` reads it). Read also accepts a plain run.json.
const FileName = "run.json.gz"

// ErrSchema is wrapped by Read's error for a run file of another schema.
var ErrSchema = errors.New("run file schema not readable by this mqbench")

// Write writes f as dir/run.json.gz (through a temporary file and a
// rename, so a reader never sees half a file).
func Write(dir string, f *RunFile) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	enc := json.NewEncoder(zw)
	enc.SetIndent("", " ")
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("encode run file: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress run file: %w", err)
	}
	path := filepath.Join(dir, FileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write run file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write run file: %w", err)
	}
	return nil
}

// Read reads a run: a results directory (its run.json.gz, else its
// run.json) or a run file itself. A file of another schema is refused with
// an error wrapping ErrSchema that says why it cannot be converted.
func Read(path string) (*RunFile, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		gz := filepath.Join(path, FileName)
		if _, err := os.Stat(gz); err == nil {
			path = gz
		} else {
			path = filepath.Join(path, "run.json")
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read run: %w", err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("read run %s: %w", path, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("read run %s: %w", path, err)
		}
	}
	var head struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("read run %s: %w", path, err)
	}
	if err := checkSchema(head.Schema); err != nil {
		return nil, fmt.Errorf("read run %s: %w", path, err)
	}
	var f RunFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("read run %s: %w", path, err)
	}
	if head.Schema == 2 {
		convertFrom2(&f)
	}
	return &f, nil
}

// convertFrom2 reads a schema 2 run as schema 3, explicitly: every figure
// keeps its meaning but an mqstore cell's drainNs, which there is Close
// (the final flush plus dispatch and the ConsumeQueue and index flush,
// longer than Store.Flush) — a note says so, since the two parts cannot
// be told apart afterwards; and a peer whose durable position moved only
// at Drain loses its "not sustained" verdict (durableAtDrainOnly), derived
// from its repeats as a schema 3 run derives it.
func convertFrom2(f *RunFile) {
	f.ConvertedFrom, f.Schema = 2, SchemaVersion
	for i := range f.Peers {
		c := &f.Peers[i]
		if c.Measured() && DurableOnlyAtDrain(c.MeasuredRepeats()) {
			c.Sustained, c.DurableAtDrainOnly = nil, true
		}
	}
	f.Notes = append(f.Notes, "converted from schema 2: mqstore cells' drain (drainNs) is Close there — the final flush plus dispatch and the "+
		"ConsumeQueue and index flush — where schema 3 times Store.Flush alone (the CommitLog made durable) and Close apart (closeNs); "+
		"peers whose durability showed only at Drain have no sustained verdict")
}

func checkSchema(v int) error {
	switch {
	case v == SchemaVersion, v == 2: // 2 is converted (convertFrom2)
		return nil
	case v == 1:
		return fmt.Errorf("schema 1, this mqbench reads schema %d and does not convert it: schema 1's async MB/s are bytes accepted into "+
			"buffers (not durable), its latency percentiles leave out the arrivals a saturated cell dropped, and its latency cells ran each "+
			"system at a fraction of its own throughput — figures schema %d cannot be derived from; run the benchmark again: %w", SchemaVersion, SchemaVersion, ErrSchema)
	case v > SchemaVersion:
		return fmt.Errorf("schema %d is newer than this mqbench (schema %d): use the mqbench that wrote it: %w", v, SchemaVersion, ErrSchema)
	}
	return fmt.Errorf("schema %d: this mqbench reads schema %d: %w", v, SchemaVersion, ErrSchema)
}
