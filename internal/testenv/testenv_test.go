package testenv

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestRequired(t *testing.T) {
	for _, c := range []struct {
		env, need string
		want      bool
	}{
		{"", Root, false},
		{"root,uring", Root, true},
		{"root, uring", Uring, true},
		{"root", Uring, false},
		{"all", Loop, true},
		{"rooty", Root, false},
		{"root,uring,fuse", FUSE, true},
	} {
		t.Setenv(EnvRequire, c.env)
		if got := Required(c.need); got != c.want {
			t.Errorf("%s=%q Required(%q) = %v, want %v", EnvRequire, c.env, c.need, got, c.want)
		}
	}
}

// TestSkipBecomesFailure runs a child test that calls Skip, once without and
// once with the need required, and checks the outcome of each.
func TestSkipBecomesFailure(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		Skip(t, Uring, "the child always lacks it")
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(require string) (string, error) {
		cmd := exec.Command(exe, "-test.run", "^TestSkipBecomesFailure$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", EnvRequire+"="+require)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "needs uring") {
		t.Fatalf("without %s the child must skip naming the need; err=%v\n%s", EnvRequire, err, out)
	}
	out, err = run("root,uring")
	if err == nil || !strings.Contains(out, "--- FAIL") {
		t.Fatalf("with %s=root,uring the child must fail; err=%v\n%s", EnvRequire, err, out)
	}
}

// TestLeaveOut: the names join -test.skip's pattern, after any already
// there, and match whole test names only.
func TestLeaveOut(t *testing.T) {
	f := flag.Lookup("test.skip")
	old := f.Value.String()
	t.Cleanup(func() { f.Value.Set(old) })
	f.Value.Set("")
	if err := LeaveOut("TestA", "TestB"); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != "^(TestA|TestB)$" {
		t.Fatalf("-test.skip %q", got)
	}
	if err := LeaveOut("TestC"); err != nil {
		t.Fatal(err)
	}
	if got := f.Value.String(); got != "^(TestA|TestB)$|^(TestC)$" {
		t.Fatalf("-test.skip %q after a second call", got)
	}
	if err := LeaveOut(); err != nil || f.Value.String() != "^(TestA|TestB)$|^(TestC)$" {
		t.Fatalf("LeaveOut() changed -test.skip to %q (%v)", f.Value.String(), err)
	}
}
