package sleep

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFor(t *testing.T) {
	require.NoError(t, For(t.Context(), time.Millisecond), "the whole duration")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, For(ctx, time.Hour), context.Canceled, "a context that ended ends the wait")
}

func TestPoll(t *testing.T) {
	for _, tc := range []struct {
		name      string
		doneAfter int // steps; 0: never
		cancel    bool
		wantSteps int
		wantErr   error
	}{
		{name: "done at once: one step, no wait", doneAfter: 1, wantSteps: 1},
		{name: "done on the third step", doneAfter: 3, wantSteps: 3},
		{name: "the context ends", cancel: true, wantSteps: 1, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			steps := 0
			err := Poll(ctx, time.Millisecond, func(context.Context) bool {
				steps++
				if tc.cancel {
					cancel()
				}
				return steps == tc.doneAfter
			})
			require.ErrorIs(t, err, tc.wantErr)
			if tc.wantErr == nil {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantSteps, steps)
		})
	}
}
