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

// Poll calls step at once and then every interval until step says it is done (nil) or ctx
// ends (ctx's error): the skeleton of the loops that follow something, such as a job until it
// serves (jobstatus.Wait) or the console's event stream.
func Poll(ctx context.Context, interval time.Duration, step func(ctx context.Context) (done bool)) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !step(ctx) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
