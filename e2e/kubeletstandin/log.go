// Package kubeletstandin is a STAND-IN for what cannot run on these machines between a VM's
// serial console and the kube-apiserver's pods/log: KubeVirt's guest-console-log container
// (virt-tail, which turns the guest's serial console into the container's output), the
// container runtime (which writes that output to a CRI log file with a timestamp per line) and
// the kubelet (which serves the file at /containerLogs/{namespace}/{pod}/{container} over TLS,
// with follow, sinceTime, sinceSeconds, tailLines, timestamps and limitBytes). A real
// kube-apiserver reaches it as it reaches any kubelet: at a Node's InternalIP and
// status.daemonEndpoints.kubeletEndpoint.Port.
//
// A ContainerLog is one container's CRI log file. Append adds a line as the runtime would; a
// Tail copies a console file (what a VM's serial console carries: the real inference agent's
// output, or a test's writer) into it line by line as it grows.
package kubeletstandin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// criTime is the CRI log's and the kubelet's timestamp layout (RFC 3339 with nanoseconds,
// always nine digits).
const criTime = "2006-01-02T15:04:05.000000000Z07:00"

// ContainerLog is one container's CRI log file ("<time> stdout F <line>" per line) and who
// waits for more of it.
type ContainerLog struct {
	path string

	mu     sync.Mutex
	f      *os.File
	more   chan struct{} // closed and replaced on every append
	closed bool
	now    func() time.Time
}

// NewContainerLog makes an empty CRI log at path.
func NewContainerLog(path string) (*ContainerLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return &ContainerLog{path: path, f: f, more: make(chan struct{}), now: time.Now}, nil
}

// Append writes lines as the container printed them now (a line holds no newline).
func (l *ContainerLog) Append(lines ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("kubelet stand-in: the container has stopped")
	}
	var b bytes.Buffer
	for _, line := range lines {
		b.WriteString(l.now().UTC().Format(criTime))
		b.WriteString(" stdout F ")
		b.WriteString(strings.TrimRight(line, "\r\n"))
		b.WriteByte('\n')
	}
	if _, err := l.f.Write(b.Bytes()); err != nil {
		return err
	}
	close(l.more)
	l.more = make(chan struct{})
	return nil
}

// Close stops the container: a follow ends once it has sent everything.
func (l *ContainerLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.more)
	return l.f.Close()
}

// waiter is what a follow at EOF waits on, and whether the container has stopped.
func (l *ContainerLog) waiter() (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.more, l.closed
}

// Options are the kubelet's log options (a container's /containerLogs query).
type Options struct {
	Follow     bool
	Timestamps bool
	// TailLines < 0: every line. SinceTime zero: from the start. LimitBytes <= 0: no limit.
	TailLines  int64
	SinceTime  time.Time
	LimitBytes int64
}

// Serve writes the log to w as the kubelet does: the last TailLines lines, of those not
// before SinceTime, each with its time when Timestamps, at most LimitBytes bytes; with Follow,
// what is appended later too, until the container stops or ctx ends. flush is called after
// every burst written (nil: none).
func (l *ContainerLog) Serve(ctx context.Context, w io.Writer, o Options, flush func()) error {
	f, err := os.Open(l.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.TailLines >= 0 {
		start, err := tailStart(f, o.TailLines)
		if err != nil {
			return err
		}
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return err
		}
	}
	lw := &limitWriter{w: w, limited: o.LimitBytes > 0, left: o.LimitBytes}
	r := bufio.NewReaderSize(f, 64<<10)
	var partial []byte
	for {
		more, closed := l.waiter()
		for {
			chunk, err := r.ReadSlice('\n')
			partial = append(partial, chunk...)
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				break // EOF, with partial holding a line still being written
			}
			done, werr := writeLine(lw, partial, o)
			partial = partial[:0]
			if werr != nil || done {
				return werr
			}
		}
		if flush != nil {
			flush()
		}
		if !o.Follow || closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-more:
		}
	}
}

// writeLine writes one CRI line as the kubelet shows it; done once LimitBytes is spent.
func writeLine(lw *limitWriter, cri []byte, o Options) (done bool, err error) {
	ts, rest, ok := bytes.Cut(cri, []byte(" "))
	if !ok {
		return false, fmt.Errorf("kubelet stand-in: not a CRI log line: %q", cri)
	}
	at, err := time.Parse(criTime, string(ts))
	if err != nil {
		return false, fmt.Errorf("kubelet stand-in: CRI log time: %w", err)
	}
	if !o.SinceTime.IsZero() && at.Before(o.SinceTime) {
		return false, nil
	}
	// "<stream> <P|F> <content>"
	fields := bytes.SplitN(rest, []byte(" "), 3)
	if len(fields) != 3 {
		return false, fmt.Errorf("kubelet stand-in: not a CRI log line: %q", cri)
	}
	var out []byte
	if o.Timestamps {
		out = append(append(out, ts...), ' ')
	}
	out = append(out, fields[2]...)
	if _, err := lw.Write(out); err != nil {
		if errors.Is(err, errLimit) {
			return true, nil
		}
		return false, err
	}
	return false, nil
}

var errLimit = errors.New("limitBytes reached")

// limitWriter writes at most left bytes when limited, cutting the write that crosses the
// limit, as the kubelet's LimitWriter does.
type limitWriter struct {
	w       io.Writer
	limited bool
	left    int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if !l.limited {
		return l.w.Write(p)
	}
	if l.left <= 0 {
		return 0, errLimit
	}
	cut := int64(len(p)) > l.left
	if cut {
		p = p[:l.left]
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	if err == nil && (cut || l.left == 0) {
		err = errLimit
	}
	return n, err
}

// tailStart is the offset of the n-th line from the end of f (its size when n is 0), read
// backwards from the end as the kubelet does, so a tail costs the lines it returns, not the
// file.
func tailStart(f *os.File, n int64) (int64, error) {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil || n == 0 {
		return size, err
	}
	buf := make([]byte, 64<<10)
	var ends int64
	for pos := size; pos > 0; {
		chunk := min(int64(len(buf)), pos)
		pos -= chunk
		if _, err := f.ReadAt(buf[:chunk], pos); err != nil {
			return 0, err
		}
		for i := chunk - 1; i >= 0; i-- {
			// A line's end before the last line: the n-th one found starts the tail.
			if buf[i] == '\n' && pos+i != size-1 {
				if ends++; ends == n {
					return pos + i + 1, nil
				}
			}
		}
	}
	return 0, nil
}
