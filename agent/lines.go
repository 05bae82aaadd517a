package agent

import (
	"bytes"
	"time"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/agent/runtime"
)

// assembler turns the runtime's chunks into lines, stream by stream. A line may come in many
// chunks (a pipe's reads, the daemon's 16 KiB partial messages) and may be redrawn in place
// with carriage returns (tqdm's bars redraw one line for minutes before its newline): every
// carriage-return segment goes to onSegment as it completes, so progress shows at once, and the
// line forwarded at the newline is what a terminal would show, its last non-empty segment.
// A segment longer than maxSegment keeps its first maxSegment bytes and is marked truncated,
// so memory stays bounded whatever a server prints.
type assembler struct {
	maxSegment int
	onSegment  func(stream guestlog.Stream, text string)
	onLine     func(serverLine)
	streams    map[guestlog.Stream]*partial
}

type partial struct {
	at       time.Time // when the line's first chunk came
	cur      []byte    // the segment being read
	curOver  bool
	last     string // the last complete non-empty segment of this line
	lastOver bool
}

func newAssembler(maxSegment int, onSegment func(guestlog.Stream, string), onLine func(serverLine)) *assembler {
	return &assembler{maxSegment: maxSegment, onSegment: onSegment, onLine: onLine, streams: map[guestlog.Stream]*partial{}}
}

// feed takes one chunk; the lines it completes carry the chunk's cursor (a chunk of the
// daemon ends at a line's end: resuming after it repeats nothing).
func (a *assembler) feed(c runtime.Chunk) {
	p := a.streams[c.Stream]
	if p == nil {
		p = &partial{}
		a.streams[c.Stream] = p
	}
	data := c.Data
	for len(data) > 0 {
		if p.at.IsZero() {
			p.at = c.Time
		}
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			p.add(data, a.maxSegment)
			return
		}
		p.add(data[:i], a.maxSegment)
		if data[i] == '\r' {
			a.endSegment(c.Stream, p)
		} else {
			a.endLine(c.Stream, p, c.Cursor)
		}
		data = data[i+1:]
	}
}

func (p *partial) add(b []byte, limit int) {
	if room := limit - len(p.cur); len(b) > room {
		b, p.curOver = b[:max(room, 0)], true
	}
	p.cur = append(p.cur, b...)
}

func (a *assembler) endSegment(stream guestlog.Stream, p *partial) {
	if len(p.cur) == 0 {
		return
	}
	seg := string(p.cur)
	a.onSegment(stream, seg)
	p.last, p.lastOver = seg, p.curOver
	p.cur, p.curOver = p.cur[:0], false
}

func (a *assembler) endLine(stream guestlog.Stream, p *partial, cursor runtime.Cursor) {
	text, over := string(p.cur), p.curOver
	if text != "" {
		a.onSegment(stream, text)
	} else if p.last != "" {
		text, over = p.last, p.lastOver
	}
	a.onLine(serverLine{stream: stream, at: p.at, text: text, truncated: over, cursor: cursor})
	*p = partial{cur: p.cur[:0]}
}

// flush ends the lines still open (the server exited without a last newline).
func (a *assembler) flush(cursor runtime.Cursor) {
	for _, s := range []guestlog.Stream{guestlog.Stdout, guestlog.Stderr} {
		if p := a.streams[s]; p != nil && (len(p.cur) > 0 || p.last != "") {
			a.endLine(s, p, cursor)
		}
	}
}
