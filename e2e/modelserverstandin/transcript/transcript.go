// Package transcript reads the transcripts of model servers' output that the stand-in model
// server replays and the stage parser's tests feed (format: agent/serverlog/testdata/PROVENANCE.md).
package transcript

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kind is what a step of a transcript does.
type Kind int

const (
	Write   Kind = iota // write Text to Stream
	Healthy             // /health answers from here on
	Exit                // exit with Code
	Sleep               // pause for Pause
)

// Step is one line of a transcript.
type Step struct {
	Kind   Kind
	Stream int    // 1 stdout, 2 stderr
	Text   string // as written: carriage returns decoded, the newline added unless \c
	Code   int
	Pause  time.Duration
	// At is the timestamp the text carries (vLLM's or NeMo's), zero if none: the stand-in
	// paces the lines by it.
	At time.Time
	// Line is the transcript's line number, for messages.
	Line int
}

// Read reads a transcript file.
func Read(path string) ([]Step, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	steps, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return steps, nil
}

// Parse reads a transcript.
func Parse(r io.Reader) ([]Step, error) {
	var steps []Step
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == "@healthy":
			steps = append(steps, Step{Kind: Healthy, Line: n})
		case strings.HasPrefix(line, "@sleep "):
			d, err := time.ParseDuration(strings.TrimPrefix(line, "@sleep "))
			if err != nil {
				return nil, fmt.Errorf("line %d: @sleep wants a duration: %q", n, line)
			}
			steps = append(steps, Step{Kind: Sleep, Pause: d, Line: n})
		case strings.HasPrefix(line, "@exit "):
			code, err := strconv.Atoi(strings.TrimPrefix(line, "@exit "))
			if err != nil {
				return nil, fmt.Errorf("line %d: @exit wants a number: %q", n, line)
			}
			steps = append(steps, Step{Kind: Exit, Code: code, Line: n})
		case strings.HasPrefix(line, "1 ") || strings.HasPrefix(line, "2 "):
			text := strings.ReplaceAll(line[2:], `\r`, "\r")
			if t, ok := strings.CutSuffix(text, `\c`); ok {
				text = t
			} else {
				text += "\n"
			}
			steps = append(steps, Step{Kind: Write, Stream: int(line[0] - '0'), Text: text, At: stamp(text), Line: n})
		default:
			return nil, fmt.Errorf("line %d: want \"1 text\", \"2 text\", @healthy, @sleep D, @exit N or a # comment: %q", n, line)
		}
	}
	return steps, sc.Err()
}

var (
	vllmStamp = regexp.MustCompile(`\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) `)
	nemoStamp = regexp.MustCompile(`^\[NeMo [DIWEC] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) `)
)

// stamp reads the time a vLLM or NeMo line carries (vLLM's has no year: 2000 stands in, the
// stand-in only needs the differences).
func stamp(text string) time.Time {
	if m := vllmStamp.FindStringSubmatch(text); m != nil {
		t, _ := time.Parse("2006-01-02 15:04:05", "2000-"+m[1])
		return t
	}
	if m := nemoStamp.FindStringSubmatch(text); m != nil {
		t, _ := time.Parse("2006-01-02 15:04:05", m[1])
		return t
	}
	return time.Time{}
}

// Lines is what a reader of the output sees, stream by stream: the text split into lines at
// newlines, each line's carriage-return segments in order (a bar redrawn in place is one line
// of several segments).
func Lines(steps []Step, stream int) [][]string {
	var all strings.Builder
	for _, s := range steps {
		if s.Kind == Write && s.Stream == stream {
			all.WriteString(s.Text)
		}
	}
	var lines [][]string
	for _, l := range strings.SplitAfter(all.String(), "\n") {
		if l == "" {
			continue
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(l, "\n"), "\r"))
	}
	return lines
}
