//go:build !linux

package hostctl

import (
	"errors"
	"os"
)

// allocate fails outside Linux: swap files, like every host change here,
// are Linux's.
func allocate(*os.File, int64) error {
	return errors.New("hostctl: swap files need Linux")
}
