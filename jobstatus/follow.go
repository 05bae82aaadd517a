package jobstatus

import (
	"context"
	"time"

	"github.com/inferplane/inferplane/internal/sleep"
	"github.com/inferplane/inferplane/lifecycle"
)

// Wait reads a job every interval until it settles (Settled) or timeout passes, calling
// changed with each reading whose stage or reason differs from the last one's. The error of
// a read stops it at once, unless the timeout caused it. When the timeout passes, the job is
// read once more without it: that reading stands, and the caller says it is not serving yet.
// stage says a reading's stage and reason (a lifecycle.JobStatus, or the API's JobDetail).
func Wait[T any](ctx context.Context, interval, timeout time.Duration, read func(context.Context) (T, error),
	stage func(T) (lifecycle.Stage, string), changed func(T)) (T, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		v    T
		err  error
		last string
	)
	perr := sleep.Poll(wctx, interval, func(c context.Context) bool {
		v, err = read(c)
		if err != nil {
			return c.Err() == nil
		}
		s, reason := stage(v)
		if now := string(s) + ": " + reason; now != last {
			changed(v)
			last = now
		}
		return Settled(s)
	})
	switch {
	case perr == nil:
		return v, err
	case ctx.Err() != nil:
		return v, ctx.Err()
	}
	return read(ctx)
}
