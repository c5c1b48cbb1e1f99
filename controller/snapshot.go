package controller

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mmapio"
)

func defaultBackend() mappedfile.Backend { return mmapio.New(mmapio.Options{}) }

// SnapshotStore is a raft.SnapshotStore that keeps each snapshot in one
// file of its directory, written atomically through storefs (so MemFS's
// crash model covers it, which raft's FileSnapshotStore, calling the os
// package, would escape). The controller's state is a few kilobytes, so a
// sink buffers the snapshot in memory and writes it on Close. Layout:
//
//	"MQRSNAP1" | metaLen u32 | meta JSON | data | crc32c u32 (of all before)
type SnapshotStore struct {
	fs     storefs.FS
	dir    string
	retain int

	mu sync.Mutex
}

const (
	snapMagic  = "MQRSNAP1"
	snapSuffix = ".rsnap"
)

// ErrSnapshotCorrupt: a snapshot file does not check.
var ErrSnapshotCorrupt = errors.New("controller: raft snapshot corrupt")

// OpenSnapshotStore opens (creating) the snapshot directory dir, keeping the
// newest retain snapshots (at least 1).
func OpenSnapshotStore(fsys storefs.FS, dir string, retain int) (*SnapshotStore, error) {
	if retain < 1 {
		retain = 1
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("controller: open snapshot store: %w", err)
	}
	s := &SnapshotStore{fs: fsys, dir: filepath.Clean(dir), retain: retain}
	// A temporary file left by a crash mid-write is garbage.
	names, err := fsys.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("controller: open snapshot store: %w", err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, snapSuffix+".tmp") {
			if err := storefs.RemoveDurably(fsys, filepath.Join(s.dir, n)); err != nil {
				return nil, fmt.Errorf("controller: open snapshot store: %w", err)
			}
		}
	}
	return s, nil
}

func snapID(term, index uint64, at time.Time) string {
	return fmt.Sprintf("%020d-%020d-%d", index, term, at.UnixMilli())
}

// Create implements raft.SnapshotStore.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("controller: snapshot version %d not supported", version)
	}
	meta := raft.SnapshotMeta{Version: version, ID: snapID(term, index, time.Now()), Index: index, Term: term,
		Configuration: configuration, ConfigurationIndex: configurationIndex}
	return &snapSink{store: s, meta: meta}, nil
}

type snapSink struct {
	store *SnapshotStore
	meta  raft.SnapshotMeta
	buf   bytes.Buffer
	done  bool
}

func (k *snapSink) ID() string                  { return k.meta.ID }
func (k *snapSink) Write(p []byte) (int, error) { return k.buf.Write(p) }
func (k *snapSink) Cancel() error               { k.done = true; return nil }

func (k *snapSink) Close() error {
	if k.done {
		return nil
	}
	k.done = true
	k.meta.Size = int64(k.buf.Len())
	meta := mustJSON(k.meta)
	var out bytes.Buffer
	out.WriteString(snapMagic)
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(meta)))
	out.Write(n[:])
	out.Write(meta)
	out.Write(k.buf.Bytes())
	binary.LittleEndian.PutUint32(n[:], crc32.Checksum(out.Bytes(), crcTable))
	out.Write(n[:])
	s := k.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := storefs.WriteFileAtomic(s.fs, filepath.Join(s.dir, k.meta.ID+snapSuffix), out.Bytes()); err != nil {
		return fmt.Errorf("controller: write snapshot %s: %w", k.meta.ID, err)
	}
	return s.reapLocked()
}

func (s *SnapshotStore) idsLocked() ([]string, error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, n := range names {
		if id, ok := strings.CutSuffix(n, snapSuffix); ok {
			ids = append(ids, id)
		}
	}
	// Names start with the zero-padded index then term: newest last.
	sort.Strings(ids)
	return ids, nil
}

func (s *SnapshotStore) reapLocked() error {
	ids, err := s.idsLocked()
	if err != nil {
		return err
	}
	for len(ids) > s.retain {
		if err := storefs.RemoveDurably(s.fs, filepath.Join(s.dir, ids[0]+snapSuffix)); err != nil {
			return fmt.Errorf("controller: remove old snapshot %s: %w", ids[0], err)
		}
		ids = ids[1:]
	}
	return nil
}

func (s *SnapshotStore) read(id string) (*raft.SnapshotMeta, []byte, error) {
	b, err := s.fs.ReadFile(filepath.Join(s.dir, id+snapSuffix))
	if err != nil {
		return nil, nil, fmt.Errorf("controller: read snapshot %s: %w", id, err)
	}
	if len(b) < len(snapMagic)+8 || string(b[:len(snapMagic)]) != snapMagic {
		return nil, nil, fmt.Errorf("controller: snapshot %s: no header: %w", id, ErrSnapshotCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, nil, fmt.Errorf("controller: snapshot %s: checksum mismatch: %w", id, ErrSnapshotCorrupt)
	}
	rest := body[len(snapMagic):]
	n := int(binary.LittleEndian.Uint32(rest))
	if 4+n > len(rest) {
		return nil, nil, fmt.Errorf("controller: snapshot %s: meta length %d: %w", id, n, ErrSnapshotCorrupt)
	}
	var meta raft.SnapshotMeta
	if err := json.Unmarshal(rest[4:4+n], &meta); err != nil {
		return nil, nil, fmt.Errorf("controller: snapshot %s: meta: %v: %w", id, err, ErrSnapshotCorrupt)
	}
	return &meta, rest[4+n:], nil
}

// List implements raft.SnapshotStore: newest first; a file that does not
// check is skipped (and logged by raft as missing), never half-read.
func (s *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, err := s.idsLocked()
	if err != nil {
		return nil, fmt.Errorf("controller: list snapshots: %w", err)
	}
	var out []*raft.SnapshotMeta
	for i := len(ids) - 1; i >= 0; i-- {
		meta, _, err := s.read(ids[i])
		if err != nil {
			continue
		}
		out = append(out, meta)
	}
	return out, nil
}

// Open implements raft.SnapshotStore.
func (s *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	meta, data, err := s.read(id)
	if err != nil {
		return nil, nil, err
	}
	return meta, io.NopCloser(bytes.NewReader(data)), nil
}
