package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
	"github.com/inferplane/inferplane/agent/serverlog"
)

type assembled struct {
	lines    []serverLine
	segments []string
}

func assemble(max int, chunks ...runtime.Chunk) assembled {
	var a assembled
	asm := newAssembler(max, func(_ guestlog.Stream, s string) { a.segments = append(a.segments, s) },
		func(l serverLine) { a.lines = append(a.lines, l) })
	for _, c := range chunks {
		asm.feed(c)
	}
	asm.flush(runtime.Cursor{})
	return a
}

func chunk(stream guestlog.Stream, s string, n int) runtime.Chunk {
	t := time.Unix(1000, int64(n))
	return runtime.Chunk{Stream: stream, Time: t, Data: []byte(s), Cursor: runtime.Cursor{Time: t, N: 1}}
}

func texts(ls []serverLine) []string {
	var out []string
	for _, l := range ls {
		out = append(out, string(l.stream)+":"+l.text)
	}
	return out
}

func TestAssembler(t *testing.T) {
	for _, tc := range []struct {
		name     string
		chunks   []runtime.Chunk
		lines    []string
		segments []string
	}{
		{"lines in one chunk", []runtime.Chunk{chunk(guestlog.Stdout, "a\nb\n", 1)},
			[]string{"stdout:a", "stdout:b"}, []string{"a", "b"}},
		{"a line in pieces", []runtime.Chunk{chunk(guestlog.Stdout, "hel", 1), chunk(guestlog.Stdout, "lo wor", 2), chunk(guestlog.Stdout, "ld\n", 3)},
			[]string{"stdout:hello world"}, []string{"hello world"}},
		{"streams apart", []runtime.Chunk{chunk(guestlog.Stdout, "out ", 1), chunk(guestlog.Stderr, "err\n", 2), chunk(guestlog.Stdout, "done\n", 3)},
			[]string{"stderr:err", "stdout:out done"}, []string{"err", "out done"}},
		{"a bar redrawn: every segment parsed, the last one forwarded",
			[]runtime.Chunk{chunk(guestlog.Stderr, "\rx:  10%|", 1), chunk(guestlog.Stderr, "\rx:  50%|", 2), chunk(guestlog.Stderr, "\rx: 100%|\n", 3)},
			[]string{"stderr:x: 100%|"}, []string{"x:  10%|", "x:  50%|", "x: 100%|"}},
		{"a bar closed by a bare newline", []runtime.Chunk{chunk(guestlog.Stderr, "\rx: 100%|\r\n", 1)},
			[]string{"stderr:x: 100%|"}, []string{"x: 100%|"}},
		{"CRLF", []runtime.Chunk{chunk(guestlog.Stdout, "dos line\r\n", 1)}, []string{"stdout:dos line"}, []string{"dos line"}},
		{"no last newline", []runtime.Chunk{chunk(guestlog.Stdout, "bye", 1)}, []string{"stdout:bye"}, []string{"bye"}},
		{"an empty line", []runtime.Chunk{chunk(guestlog.Stdout, "\n", 1)}, []string{"stdout:"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := assemble(100, tc.chunks...)
			assert.Equal(t, tc.lines, texts(a.lines))
			assert.Equal(t, tc.segments, a.segments)
		})
	}
}

// A line keeps its first chunk's time and the cursor of the chunk that ends it; a segment
// over the bound is cut and marked, and the memory stays bounded.
func TestAssemblerBounds(t *testing.T) {
	a := assemble(10, chunk(guestlog.Stdout, strings.Repeat("x", 7), 1), chunk(guestlog.Stdout, strings.Repeat("y", 100000)+"\nshort\n", 2))
	assert.Equal(t, []string{"stdout:xxxxxxxyyy", "stdout:short"}, texts(a.lines))
	assert.True(t, a.lines[0].truncated)
	assert.False(t, a.lines[1].truncated)
	assert.Equal(t, time.Unix(1000, 1), a.lines[0].at)
	assert.Equal(t, time.Unix(1000, 2), a.lines[0].cursor.Time)
}

// BenchmarkReadLines is the agent's work per line of output before the console: assembling
// lines from chunks and parsing every segment for its stage (vLLM's lines of a start-up).
func BenchmarkReadLines(b *testing.B) {
	var chunkData strings.Builder
	for range 10 {
		chunkData.WriteString("(APIServer pid=1) INFO 12-03 07:03:04 [launcher.py:74] Route: /v1/chat/completions, Methods: POST\n")
		chunkData.WriteString("(EngineCore_DP0 pid=283) \rLoading safetensors checkpoint shards:  53% Completed | 9/17 [00:09<00:08,  1.02s/it]\n")
		chunkData.WriteString("INFO:     127.0.0.1:53422 - \"GET /health HTTP/1.1\" 200 OK\n")
	}
	c := runtime.Chunk{Stream: guestlog.Stdout, Data: []byte(chunkData.String())}
	lines := 0
	asm := newAssembler(2*guestlog.MaxLine, func(_ guestlog.Stream, s string) { serverlog.Parse(s) }, func(serverLine) { lines++ })
	b.SetBytes(int64(len(c.Data)))
	for b.Loop() {
		asm.feed(c)
	}
	b.ReportMetric(float64(lines)/b.Elapsed().Seconds(), "lines/s")
}
