package engine

import (
	"flag"
	"os"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
)

// TestMain runs the test binary as a helper process when a test started it
// as one (so the helper never shows as a skipped test), and leaves out the
// long trials whose flag was not given.
func TestMain(m *testing.M) {
	if dir := os.Getenv("MQSTORE_RO_DIR"); dir != "" {
		os.Exit(readOnlyHelper(dir))
	}
	if dir := os.Getenv(envWriterDir); dir != "" {
		os.Exit(writeAndWait(dir, os.Getenv(envWriterBackend)))
	}
	flag.Parse()
	if !*crashRebuild {
		if err := testenv.LeaveOut("TestPowerLossWhileRecoveryRebuildsTheIndex"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
