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
	"slices"
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
	if head.Schema == 3 {
		f.Notes = append(f.Notes, "schema 3: durable MB/s is the durable position's progress in the window, which counts a warm-up backlog "+
			"flushed inside it (schema 4 counts only the bytes accepted in the window); its tails are recomputed from the repeats' histograms")
	}
	if head.Schema < 5 && slices.ContainsFunc(f.Limits, func(l Limit) bool { return l.Name == LimitGroupCommit && l.InFlight == 2 }) {
		f.Notes = append(f.Notes, fmt.Sprintf("schema %d: each of the two writers of a two-in-flight group-commit limit wrote N records per op — "+
			"2N outstanding, more than N closed-loop producers ever have — so those limits are shown as measured and not used as the limit "+
			"(schema 5 splits the N records between the writers)", head.Schema))
	}
	return &f, nil
}

func checkSchema(v int) error {
	switch {
	case v == SchemaVersion, v == 4, v == 3: // 3 and 4: read as written, with notes
		return nil
	case v < 3:
		return fmt.Errorf("schema %d, this mqbench reads schemas 3 to %d and does not convert older ones: their figures mean other things "+
			"(schema 1's async MB/s are bytes accepted into buffers, not durable; schema 2's drain is Close); run the benchmark again: %w", v, SchemaVersion, ErrSchema)
	}
	return fmt.Errorf("schema %d is newer than this mqbench (schema %d): use the mqbench that wrote it: %w", v, SchemaVersion, ErrSchema)
}
