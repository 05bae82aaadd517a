package joblogs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

// The merge keeps each stream's order and orders streams by time once each has a line.
func TestMergeOrder(t *testing.T) {
	m := newMerge(false, 0)
	a, b := m.add(), m.add()
	now := time.Now()
	m.push(a, Entry{Time: t0.Add(2 * time.Second), Line: "a2"}, now)
	_, ok := m.pop(now)
	assert.False(t, ok, "b may still have something earlier")
	m.push(b, Entry{Time: t0.Add(1 * time.Second), Line: "b1"}, now)
	e, ok := m.pop(now)
	require.True(t, ok)
	assert.Equal(t, "b1", e.Line)
	_, ok = m.pop(now)
	assert.False(t, ok)
	m.end(b)
	e, _ = m.pop(now)
	assert.Equal(t, "a2", e.Line)
	assert.False(t, m.finished())
	m.end(a)
	assert.True(t, m.finished())

	f := newMerge(true, 100*time.Millisecond)
	a, _ = f.add(), f.add()
	f.push(a, Entry{Line: "quiet b holds a back only for the window"}, now)
	_, ok = f.pop(now.Add(50 * time.Millisecond))
	assert.False(t, ok)
	_, ok = f.pop(now.Add(100 * time.Millisecond))
	assert.True(t, ok)
}
