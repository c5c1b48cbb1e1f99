package invariants

import "testing"

// violations are one broken call of each helper, with what its message
// must name.
var violations = []struct {
	name string
	call func()
	want []string
}{
	{"True", func() { True(false, "segment full", "wrote 5 of 4") }, []string{"segment full", "wrote 5 of 4"}},
	{"Forward", func() { Forward("flushed position", 10, 9) }, []string{"flushed position", "10", "9"}},
	{"Ordered", func() { Ordered("flushed ≤ committed", 7, 6) }, []string{"flushed ≤ committed", "7 > 6"}},
	{"Ordered3/low", func() { Ordered3("flushed ≤ committed ≤ written", 3, 2, 4) }, []string{"3 ≤ 2 ≤ 4"}},
	{"Ordered3/high", func() { Ordered3("flushed ≤ committed ≤ written", 1, 5, 4) }, []string{"1 ≤ 5 ≤ 4"}},
	{"Equal", func() { Equal("next queue offset", 8, 7) }, []string{"next queue offset", "got 8, want 7"}},
	{"Once", func() { var o Once; o.Set("waiter answered"); o.Set("waiter answered") }, []string{"waiter answered", "second time"}},
}

// holds are calls of each helper whose invariant holds: never a panic.
var holds = []func(){
	func() { True(true, "x", "") },
	func() { Forward("x", 3, 3); Forward("x", 3, 4) },
	func() { Ordered("x", 3, 3); Ordered("x", -1, 0) },
	func() { Ordered3("x", 1, 1, 1); Ordered3("x", 0, 1, 2) },
	func() { Equal("x", 5, 5) },
	func() { var o Once; o.Set("x") },
}

func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestHolds(t *testing.T) {
	for i, f := range holds {
		if v := recovered(f); v != nil {
			t.Errorf("case %d: a holding invariant panicked: %v", i, v)
		}
	}
}
