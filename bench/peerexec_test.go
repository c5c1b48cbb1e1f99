package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --peers remoting finds the interop module from inside the repository
// (mqbench's working directory) and says what to do from outside it.
func TestInteropModuleDir(t *testing.T) {
	dir, err := interopModuleDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/mqstore/mqstore/interop") {
		t.Fatalf("%s is not the interop module: %v", dir, err)
	}
	if _, err := interopModuleDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--peers remoting") {
		t.Fatalf("outside the repository: %v", err)
	}
	if !(peerList{}).has(RemotingPeer) {
		t.Fatal("the remoting peer is not known without mqpeer's list")
	}
}
