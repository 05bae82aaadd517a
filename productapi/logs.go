package productapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"golang.org/x/time/rate"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/jobstatus"
	"github.com/inferplane/inferplane/lifecycle/cluster"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/usage"
)

// NDJSON is the media type of a job's log: one JSON object per line.
const NDJSON = "application/x-ndjson"

// LogWriteTimeout bounds each write of a log stream: a client that stops reading for this
// long is cut off (its lines are not buffered for it), whatever the server's own timeouts.
const LogWriteTimeout = 10 * time.Second

// logWriteTimeout is LogWriteTimeout; the tests shorten it.
var logWriteTimeout = LogWriteTimeout

// FollowMaxRate is how many console lines a second one follow reads at most, and
// ServerMaxRate how many all the follows of one API replica read together: a VM printing
// faster is read more slowly, and a follow 10 s behind skips to the present with a notice
// (joblogs.Query.MaxRate), so a replica's reads of the logs cost at most ServerMaxRate lines a
// second however fast its VMs print. Reading without following is paced by its client only.
const (
	FollowMaxRate = 1000
	ServerMaxRate = 10000
)

// defaultTail is how many of each VM's last console lines a log starts from when neither
// tail nor since is given.
const defaultTail = 100

// GuestLogs is what a ClusterReader offers when it can read the VMs' console logs (the
// pods/log of their virt-launcher pods): clusterwatch.Watcher does. Without it, the stages
// are the VMIs' and the logs route answers 503.
type GuestLogs interface {
	GuestLogs(ctx context.Context, t cluster.Tenant) (joblogs.Cluster, error)
}

type logsInput struct {
	JobParams
	Replica int32  `query:"replica" minimum:"-1" default:"-1" doc:"Only this replica's VMs (-1: every replica)"`
	Node    int32  `query:"node" minimum:"-1" default:"-1" doc:"Only the VMs of this node rank in each replica (0 is the head; -1: every node)"`
	Follow  bool   `query:"follow" doc:"Keep the stream open for new lines and for VM instances started later"`
	Since   string `query:"since" maxLength:"64" doc:"Leave out lines before a duration back from now (10m) or an RFC 3339 time"`
	Tail    string `query:"tail" pattern:"^(-1|[0-9]{1,9})$" doc:"Start from each VM's last N console lines (-1: all); default 100, or all with since"`
	Search  string `query:"search" maxLength:"256" doc:"Only the lines that contain this text, ignoring case (statuses and notices are always sent)"`
}

type logsOutput struct {
	Body func(huma.Context)
}

// logsOperation documents the route's streamed answer: its body is NDJSON of LogEntry.
func (s *Server) logsOperation(op huma.Operation) huma.Operation {
	schema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[apiv1.LogEntry](), true, "LogEntry")
	op.Responses = map[string]*huma.Response{"200": {
		Description: "The job's log: one JSON object (LogEntry) per line, flushed as it comes; following, until the client goes.",
		Content:     map[string]*huma.MediaType{NDJSON: {Schema: schema}},
	}}
	return op
}

func (s *Server) jobLogs(ctx context.Context, in *logsInput) (*logsOutput, error) {
	_, tp, jp, err := s.jobAt(ctx, in.Tenant, in.Job, access.Read)
	if err != nil {
		return nil, err
	}
	q := joblogs.Query{Tenant: in.Tenant, Job: in.Job, Follow: in.Follow, Search: in.Search, Tail: -1, MaxRate: FollowMaxRate}
	if q.Since, err = usage.ParseSince(in.Since, s.opts.Now()); err != nil {
		return nil, newProblem(http.StatusUnprocessableEntity, "since: "+err.Error())
	}
	switch {
	case in.Tail != "":
		q.Tail, _ = strconv.ParseInt(in.Tail, 10, 64) // the pattern holds it to a number
	case q.Since.IsZero():
		q.Tail = defaultTail
	}
	if in.Replica >= 0 {
		if in.Replica >= jp.Job.Spec.Replicas {
			return nil, newProblem(http.StatusUnprocessableEntity, fmt.Sprintf("replica %d: job %s/%s has %d replicas (0 to %d)", in.Replica, in.Tenant, in.Job, jp.Job.Spec.Replicas, jp.Job.Spec.Replicas-1))
		}
		q.Replica = &in.Replica
	}
	if in.Node >= 0 {
		if in.Node >= max(jp.NodesPerReplica, 1) {
			return nil, newProblem(http.StatusUnprocessableEntity, fmt.Sprintf("node %d: each replica of %s/%s has %d node(s) (0 to %d)", in.Node, in.Tenant, in.Job, max(jp.NodesPerReplica, 1), max(jp.NodesPerReplica, 1)-1))
		}
		q.Node = &in.Node
	}
	t := jobstatus.Tenant(tp)
	q.Namespace = t.Namespace
	cl, err := s.guestLogs(ctx, t)
	if err != nil {
		return nil, err
	}
	// The pods are listed before the answer starts, so that a cluster that cannot be read is
	// a problem, not a stream that ends at once.
	if _, err := cl.Pods(ctx, q.Namespace, joblogs.Selector(q.Tenant, q.Job, q.Replica, q.Node)); err != nil {
		s.log.Warn("logs: listing pods failed", "tenant", in.Tenant, "job", in.Job, "error", err)
		return nil, newProblem(http.StatusBadGateway, fmt.Sprintf("the cluster of tenant %s: list the VMs' pods: %v", in.Tenant, err))
	}
	who := identity(ctx).Subject
	r := &joblogs.Reader{Cluster: cl, Limit: s.logLimit()}
	return &logsOutput{Body: func(hc huma.Context) { s.streamLogs(hc, r, q, who) }}, nil
}

// logLimit is the replica's limit on the console lines all its follows read a second.
func (s *Server) logLimit() *rate.Limiter {
	s.logRateOnce.Do(func() { s.logRate = rate.NewLimiter(ServerMaxRate, ServerMaxRate) })
	return s.logRate
}

// guestLogs reaches a tenant's console logs, or says why it cannot.
func (s *Server) guestLogs(ctx context.Context, t cluster.Tenant) (joblogs.Cluster, error) {
	gl, ok := s.opts.Clusters.(GuestLogs)
	if !ok {
		reason := s.opts.NoClusterReason
		if s.opts.Clusters != nil {
			reason = "this server's view of the clusters does not read the VMs' console logs"
		}
		return nil, newProblem(http.StatusServiceUnavailable, "the logs need the clusters: "+reason)
	}
	cl, err := gl.GuestLogs(ctx, t)
	if err != nil {
		s.log.Warn("logs: the tenant's cluster", "tenant", t.Name, "error", err)
		return nil, newProblem(http.StatusBadGateway, "the cluster of tenant "+t.Name+": "+err.Error())
	}
	return cl, nil
}

// streamLogs writes the log as NDJSON, flushed whenever the reader has shown what it had (one
// flush per burst, not per line), each write bounded by LogWriteTimeout: a client that stops
// reading is cut off, and the reads it held back stop with it. The server needs no write
// timeout of its own for this (the deadline is set here, per write, and lifts any it had).
func (s *Server) streamLogs(hc huma.Context, r *joblogs.Reader, q joblogs.Query, who string) {
	req, w := humago.Unwrap(hc)
	ctx := req.Context()
	rc := http.NewResponseController(w)
	hc.SetHeader("Content-Type", NDJSON)
	hc.SetHeader("Cache-Control", "no-store")
	hc.SetHeader("X-Accel-Buffering", "no") // proxies that buffer would hold the lines back
	hc.SetStatus(http.StatusOK)
	write := func(e apiv1.LogEntry) error {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := rc.SetWriteDeadline(time.Now().Add(logWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	flush := func() error {
		if err := rc.SetWriteDeadline(time.Now().Add(logWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		return nil
	}
	r.Idle = flush
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return
	}
	start, lines := time.Now(), 0
	err := r.Stream(ctx, q, func(e joblogs.Entry) error {
		lines++
		return write(LogEntry(e))
	})
	if err != nil && ctx.Err() == nil {
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			s.log.Info("logs: a client stopped reading; cut off", "tenant", q.Tenant, "job", q.Job, "by", who, "after", logWriteTimeout)
			return
		}
		_ = write(apiv1.LogEntry{Kind: string(joblogs.KindNotice), Time: time.Now().UTC(), Message: "the log ended early: " + err.Error()})
	}
	_ = flush()
	s.log.Debug("logs: stream ended", "tenant", q.Tenant, "job", q.Job, "by", who, "entries", lines, "took", time.Since(start))
}

// LogEntry is an entry as the API shows it (the CLI's files path prints the same).
func LogEntry(e joblogs.Entry) apiv1.LogEntry {
	out := apiv1.LogEntry{Kind: string(e.Kind), Time: e.Time.UTC(), VM: e.VM, Stream: string(e.Stream), Line: e.Line, Truncated: e.Truncated, Message: e.Text}
	if e.VM != "" {
		out.Replica, out.Node = &e.Replica, &e.Node
	}
	if e.Status != nil {
		out.Status = agentStatus(e.Status, time.Time{})
	}
	return out
}

// agentStatus is the agent's status as the API shows it; at is when it was written (zero:
// not said).
func agentStatus(s *guestlog.Status, at time.Time) *apiv1.AgentStatus {
	out := &apiv1.AgentStatus{Stage: string(s.Stage), Since: timePtr(s.Since), Detail: s.Detail, Restarts: s.Restarts, ReportedAt: timePtr(at)}
	if p := s.Progress; p != nil {
		out.Progress = &apiv1.Progress{Done: p.Done, Total: p.Total, Unit: p.Unit}
	}
	if e := s.LastExit; e != nil {
		out.LastExit = &apiv1.Exit{Code: e.Code, AfterSeconds: e.After.Seconds(), At: e.At.UTC(), LastLines: e.LastLines}
	}
	return out
}

// stageLogs reaches a tenant's console logs for the stages' agent reports (jobstatus.Logs),
// saying why it could not.
type stageLogs struct {
	s  *Server
	gl GuestLogs
}

func (l stageLogs) GuestLogs(ctx context.Context, t cluster.Tenant) (joblogs.Cluster, error) {
	cl, err := l.gl.GuestLogs(ctx, t)
	if err != nil {
		l.s.log.Debug("stages: the console logs cannot be read", "tenant", t.Name, "error", err)
	}
	return cl, err
}
