package usage

import (
	"errors"
	"fmt"

	"github.com/inferplane/inferplane/internal/fileutil"
)

// Lock takes the ledger for this process: two servers saving one ledger would each overwrite
// the other's usage. The lock is an flock on "<path>.lock" (fileutil.Lock).
func (f LedgerFile) Lock() (unlock func(), err error) {
	unlock, err = fileutil.Lock(f.Path + ".lock")
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, fmt.Errorf("usage ledger %s is in use by another server: give each server its own ledger", f.Path)
	}
	if err != nil {
		return nil, fmt.Errorf("usage ledger %s: lock: %w", f.Path, err)
	}
	return unlock, nil
}
