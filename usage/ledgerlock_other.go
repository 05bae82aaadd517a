//go:build !unix

package usage

// Lock is a no-op where flock is not available: run one server per ledger there.
func (f LedgerFile) Lock() (unlock func(), err error) { return func() {}, nil }
