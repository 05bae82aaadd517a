//go:build unix

package fileutil

import (
	"errors"
	"os"
	"syscall"
)

// ErrLocked says another process holds the lock.
var ErrLocked = errors.New("in use by another process")

// Lock takes path (created if missing) for this process with an flock, so that two processes
// never write the same files; it is released by unlock or when the process ends (a crash never
// leaves it taken). It fails at once with ErrLocked when another process holds it.
func Lock(path string) (unlock func(), err error) {
	lf, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
		lf.Close()
	}, nil
}
