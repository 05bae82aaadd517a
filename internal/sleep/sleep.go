// Package sleep waits for a duration unless a context ends first: the one timer loop that
// retries, backoffs and polls share.
package sleep

import (
	"context"
	"time"
)

// For waits d, or until ctx ends, whichever comes first; it returns ctx's error in the second
// case and nil in the first.
func For(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
