package kubeletstandin

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stand-in serves a CRI log as the kubelet does: the last N lines (lines longer than its
// read buffer included), the lines from a time on, at most limitBytes, with or without each
// line's time.
func TestServeAsTheKubelet(t *testing.T) {
	l, err := NewContainerLog(filepath.Join(t.TempDir(), "c.log"))
	require.NoError(t, err)
	defer l.Close()
	t0 := time.Now().UTC()
	l.now = func() time.Time { return t0 }
	long := strings.Repeat("y", 100<<10)
	require.NoError(t, l.Append("one", long, "three"))
	l.now = func() time.Time { return t0.Add(2 * time.Second) }
	require.NoError(t, l.Append("four"))
	serve := func(o Options) string {
		var b bytes.Buffer
		require.NoError(t, l.Serve(context.Background(), &b, o, nil))
		return b.String()
	}
	assert.Equal(t, "one\n"+long+"\nthree\nfour\n", serve(Options{TailLines: -1}))
	assert.Equal(t, long+"\nthree\nfour\n", serve(Options{TailLines: 3}))
	assert.Equal(t, "four\n", serve(Options{TailLines: 1}))
	assert.Equal(t, "", serve(Options{TailLines: 0}))
	assert.Equal(t, "four\n", serve(Options{TailLines: -1, SinceTime: t0.Add(time.Second)}))
	assert.Equal(t, "one\nyy", serve(Options{TailLines: -1, LimitBytes: 6}))
	assert.Equal(t, fmt.Sprintf("%s four\n", t0.Add(2*time.Second).Format(criTime)), serve(Options{TailLines: 1, Timestamps: true}))
}
