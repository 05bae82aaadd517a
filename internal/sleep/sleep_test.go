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
