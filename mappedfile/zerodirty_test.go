package mappedfile

import (
	"bytes"
	"testing"
)

// TestZeroDirty: every byte ends zero, whichever chunks held data (one
// past the first chunk, one at the very end).
func TestZeroDirty(t *testing.T) {
	b := make([]byte, 3*len(zeroChunk)+5)
	b[len(zeroChunk)+1], b[len(b)-1] = 7, 9
	ZeroDirty(b)
	if !bytes.Equal(b, make([]byte, len(b))) {
		t.Fatalf("byte %d not zero", bytes.IndexFunc(b, func(r rune) bool { return r != 0 }))
	}
}
