package bench

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as mqbench's worker (the harness
// re-executes itself for workers).
func TestMain(m *testing.M) {
	MaybeWorker()
	os.Exit(m.Run())
}
