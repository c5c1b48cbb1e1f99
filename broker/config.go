package broker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/mqstore/mqstore/namesrv"
)

// Topic names RocketMQ gives meaning to.
const (
	// DefaultTopic is the template topic producers fall back to for a topic
	// with no route (RocketMQ's TBW102): with auto-create on, the broker
	// registers it, and a send to an unknown topic creates that topic.
	DefaultTopic     = "TBW102"
	RetryGroupPrefix = "%RETRY%"
	DLQGroupPrefix   = "%DLQ%"
)

// writeFileAtomic replaces path with data: a temporary file, synced,
// renamed over it, the directory synced.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp.Name(), err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// readJSON reads path into v; a missing file leaves v as it is.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s is not valid JSON (fix or remove it): %w", path, err)
	}
	return nil
}

// topicTable is the broker's topics, persisted in config/topics.json.
type topicTable struct {
	path   string
	mu     sync.Mutex
	byName map[string]namesrv.TopicConfig
}

type topicFile struct {
	TopicConfigTable map[string]namesrv.TopicConfig `json:"topicConfigTable"`
}

func loadTopics(path string) (*topicTable, error) {
	var f topicFile
	if err := readJSON(path, &f); err != nil {
		return nil, err
	}
	t := &topicTable{path: path, byName: map[string]namesrv.TopicConfig{}}
	for name, tc := range f.TopicConfigTable {
		if name == "" || tc.ReadQueueNums < 0 || tc.WriteQueueNums < 0 {
			return nil, fmt.Errorf("%s: topic %q has a bad configuration %+v", path, name, tc)
		}
		tc.TopicName = name
		t.byName[name] = tc
	}
	return t, nil
}

func (t *topicTable) get(name string) (namesrv.TopicConfig, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tc, ok := t.byName[name]
	return tc, ok
}

// snapshot copies the table (for registration and GET_ALL_TOPIC_CONFIG).
func (t *topicTable) snapshot() map[string]namesrv.TopicConfig {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]namesrv.TopicConfig, len(t.byName))
	for k, v := range t.byName {
		out[k] = v
	}
	return out
}

// put sets a topic (created reports whether it was new or changed) and
// persists the table.
func (t *topicTable) put(tc namesrv.TopicConfig) (changed bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.byName[tc.TopicName]; ok && old == tc {
		return false, nil
	}
	t.byName[tc.TopicName] = tc
	return true, t.saveLocked()
}

// replace sets the whole table (a slave copying its master's).
func (t *topicTable) replace(table map[string]namesrv.TopicConfig) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	same := len(table) == len(t.byName)
	for k, v := range table {
		if t.byName[k] != v {
			same = false
		}
	}
	if same {
		return nil
	}
	t.byName = make(map[string]namesrv.TopicConfig, len(table))
	for k, v := range table {
		t.byName[k] = v
	}
	return t.saveLocked()
}

func (t *topicTable) saveLocked() error {
	b, err := json.MarshalIndent(topicFile{TopicConfigTable: t.byName}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode topics: %w", err)
	}
	return writeFileAtomic(t.path, b)
}
