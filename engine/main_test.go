package engine

import (
	"os"
	"testing"
)

// TestMain runs the test binary as a helper process when a test started it
// as one (so the helper never shows as a skipped test).
func TestMain(m *testing.M) {
	if dir := os.Getenv("MQSTORE_RO_DIR"); dir != "" {
		os.Exit(readOnlyHelper(dir))
	}
	if dir := os.Getenv(envWriterDir); dir != "" {
		os.Exit(writeAndWait(dir, os.Getenv(envWriterBackend)))
	}
	os.Exit(m.Run())
}
