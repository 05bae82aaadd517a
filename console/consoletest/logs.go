package consoletest

import (
	"context"
	"strings"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
)

// jobLog is a job's log as a test wrote it, and who waits for more.
type jobLog struct {
	lines []console.LogLine
	more  chan struct{}
}

func (b *Backend) jobLog(tenant, job string) *jobLog {
	if b.logs == nil {
		b.logs = map[string]*jobLog{}
	}
	l := b.logs[tenant+"/"+job]
	if l == nil {
		l = &jobLog{more: make(chan struct{})}
		b.logs[tenant+"/"+job] = l
	}
	return l
}

// AppendLog adds entries to a job's log, as the job's VMs would print them: a follow sees
// them at once.
func (b *Backend) AppendLog(tenant, job string, lines ...console.LogLine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.jobLog(tenant, job)
	l.lines = append(l.lines, lines...)
	close(l.more)
	l.more = make(chan struct{})
}

// JobLogs reads a job's log as the API does: any role of the tenant may; the entries the
// query narrows to (replica, node, search on the lines), the last Tail of them, then,
// following, the ones appended later, until ctx ends or each fails.
func (b *Backend) JobLogs(ctx context.Context, id access.Identity, tenant, job string, q console.LogQuery, each func(console.LogLine) error) error {
	b.mu.Lock()
	if err := b.decide(id, tenant, access.Read); err != nil {
		b.mu.Unlock()
		return err
	}
	if _, j := b.find(tenant, job); j == nil {
		b.mu.Unlock()
		return console.ErrNotFound
	}
	b.calls["JobLogs"]++
	l := b.jobLog(tenant, job)
	next := 0
	if q.Tail != nil && int(*q.Tail) < len(l.lines) {
		next = len(l.lines) - int(*q.Tail)
	}
	b.mu.Unlock()
	for {
		b.mu.Lock()
		batch, more := l.lines[next:], l.more
		next = len(l.lines)
		b.mu.Unlock()
		for _, e := range batch {
			if !matches(q, e) {
				continue
			}
			if err := each(e); err != nil {
				return err
			}
		}
		if !q.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-more:
		}
	}
}

func matches(q console.LogQuery, e console.LogLine) bool {
	if q.Replica != nil && (e.Replica == nil || *e.Replica != *q.Replica) {
		return false
	}
	if q.Node != nil && (e.Node == nil || *e.Node != *q.Node) {
		return false
	}
	return q.Search == "" || e.Kind != "line" || strings.Contains(strings.ToLower(e.Line), strings.ToLower(q.Search))
}
