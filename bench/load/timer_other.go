//go:build !linux

package load

import "errors"

func newPreciseSleeper() (sleeper, error) {
	return nil, errors.New("no precise sleeper on this platform")
}
