//go:build unix

package usage

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Lock takes the ledger for this process: two servers saving one ledger would each overwrite
// the other's usage. The lock is an flock on "<path>.lock", released by unlock or when the
// process ends (so a crash never leaves it taken).
func (f LedgerFile) Lock() (unlock func(), err error) {
	lf, err := os.OpenFile(f.Path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("usage ledger %s: %w", f.Path, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("usage ledger %s is in use by another server: give each server its own ledger", f.Path)
		}
		return nil, fmt.Errorf("usage ledger %s: lock: %w", f.Path, err)
	}
	return func() {
		_ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
		lf.Close()
	}, nil
}
