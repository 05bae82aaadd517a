package apibackend

import (
	"context"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/client"
)

// JobLogs reads the job's log from the API's GET .../logs, streamed in process: the API's
// handler writes each entry into a pipe this reads from, so a browser that reads slowly slows
// the API's reads of the VMs' logs, never fills memory.
func (b *Backend) JobLogs(ctx context.Context, id access.Identity, tenant, job string, q console.LogQuery, each func(console.LogLine) error) error {
	err := b.c.Logs(as(ctx, id), tenant, job, client.LogQuery{Replica: q.Replica, Node: q.Node, Follow: q.Follow, Tail: q.Tail, Since: q.Since, Search: q.Search},
		func(e apiv1.LogEntry) error {
			return each(console.LogLine{Kind: e.Kind, Time: e.Time, Replica: e.Replica, Node: e.Node, VM: e.VM, Stream: e.Stream,
				Line: e.Line, Truncated: e.Truncated, Message: e.Message})
		})
	if err != nil && ctx.Err() == nil {
		return problem(err)
	}
	return nil
}
