package disktest

import (
	"testing"

	"golang.org/x/sys/unix"
)

const ramfsMagic = 0x858458f6

// inMemory reports whether dir is on tmpfs or ramfs.
func inMemory(t testing.TB, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == ramfsMagic
}
