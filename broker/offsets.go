package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
)

// offsetTable holds the consumer groups' committed offsets ("next offset to
// consume" per queue), persisted to config/consumerOffset.json by flush.
type offsetTable struct {
	path  string
	mu    sync.Mutex
	table map[string]map[int32]int64 // "topic@group" → queue id → offset
	dirty bool
}

type offsetFile struct {
	OffsetTable map[string]map[string]int64 `json:"offsetTable"`
}

func offsetKey(topic, group string) string { return topic + "@" + group }

func loadOffsets(path string) (*offsetTable, error) {
	var f offsetFile
	if err := readJSON(path, &f); err != nil {
		return nil, err
	}
	t := &offsetTable{path: path}
	table, err := decodeOffsets(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.table = table
	return t, nil
}

func decodeOffsets(f offsetFile) (map[string]map[int32]int64, error) {
	table := map[string]map[int32]int64{}
	for key, queues := range f.OffsetTable {
		if !strings.Contains(key, "@") {
			return nil, fmt.Errorf("offset key %q is not topic@group", key)
		}
		m := map[int32]int64{}
		for q, off := range queues {
			id, err := strconv.ParseInt(q, 10, 32)
			if err != nil || id < 0 || off < 0 {
				return nil, fmt.Errorf("offset %s queue %q = %d is not a queue id and an offset", key, q, off)
			}
			m[int32(id)] = off
		}
		table[key] = m
	}
	return table, nil
}

func (t *offsetTable) get(topic, group string, queueID int32) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	off, ok := t.table[offsetKey(topic, group)][queueID]
	return off, ok
}

func (t *offsetTable) set(topic, group string, queueID int32, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := offsetKey(topic, group)
	m := t.table[key]
	if m == nil {
		m = map[int32]int64{}
		t.table[key] = m
	}
	if old, ok := m[queueID]; !ok || old != offset {
		m[queueID] = offset
		t.dirty = true
	}
}

func (t *offsetTable) encodeLocked() offsetFile {
	f := offsetFile{OffsetTable: map[string]map[string]int64{}}
	for key, queues := range t.table {
		m := map[string]int64{}
		for q, off := range queues {
			m[strconv.Itoa(int(q))] = off
		}
		f.OffsetTable[key] = m
	}
	return f
}

// encode returns the table as JSON (GET_ALL_CONSUMER_OFFSET).
func (t *offsetTable) encode() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, _ := json.Marshal(t.encodeLocked())
	return b
}

// replace takes a master's table (a slave's copy).
func (t *offsetTable) replace(body []byte) error {
	var f offsetFile
	if err := json.Unmarshal(body, &f); err != nil {
		return fmt.Errorf("consumer offsets from the master: %w", err)
	}
	table, err := decodeOffsets(f)
	if err != nil {
		return fmt.Errorf("consumer offsets from the master: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !maps.EqualFunc(t.table, table, func(a, b map[int32]int64) bool { return maps.Equal(a, b) }) {
		t.table = table
		t.dirty = true
	}
	return nil
}

// flush persists the table if it changed.
func (t *offsetTable) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.dirty {
		return nil
	}
	b, err := json.MarshalIndent(t.encodeLocked(), "", "  ")
	if err != nil {
		return fmt.Errorf("encode consumer offsets: %w", err)
	}
	if err := writeFileAtomic(t.path, b); err != nil {
		return err
	}
	t.dirty = false
	return nil
}
