package failover

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/mqstore/mqstore/engine/storefs"
)

// MetaFile is the broker's identity in its store directory: its broker
// set, its id and the register code that lets the controller give the id
// back to this store (and to no other) after a restart.
const MetaFile = "broker.meta"

// Meta is the content of MetaFile.
type Meta struct {
	Set string `json:"set"`
	// ID is the broker's id in the set; 0 until the first registration
	// answered (the file is written before it, with the register code).
	ID           int64  `json:"id"`
	RegisterCode string `json:"registerCode"`
}

// ErrMeta marks a broker.meta that does not fit the options or cannot be
// read; the error names the file and the repair.
var ErrMeta = errors.New("failover: broker metadata")

func loadMeta(fsys storefs.FS, dir string) (Meta, bool, error) {
	path := filepath.Join(dir, MetaFile)
	ok, err := fsys.Exists(path)
	if err != nil {
		return Meta{}, false, fmt.Errorf("%w: %s: %w", ErrMeta, path, err)
	}
	if !ok {
		return Meta{}, false, nil
	}
	data, err := fsys.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Meta{}, false, fmt.Errorf("%w: read %s: %w", ErrMeta, path, err)
	}
	var m Meta
	if err := json.Unmarshal(data, &m); err != nil || m.Set == "" || m.ID < 0 || m.RegisterCode == "" {
		return Meta{}, false, fmt.Errorf("%w: %s is damaged (%v); it names this store's broker id: restore it, or remove it "+
			"and remove the broker from its set (its id is then given anew)", ErrMeta, path, err)
	}
	return m, true, nil
}

func saveMeta(fsys storefs.FS, dir string, m Meta) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := storefs.WriteFileAtomic(fsys, filepath.Join(dir, MetaFile), append(data, '\n')); err != nil {
		return fmt.Errorf("%w: write: %w", ErrMeta, err)
	}
	return nil
}

func newRegisterCode() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("failover: register code: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
