package metering

import (
	"context"
	"net/url"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/inferplane/inferplane/lifecycle/gateway"
	"github.com/inferplane/inferplane/usage"
)

// Gateways reads the keys' token counts from the admin address of every gateway replica (xds
// serve), as `keys usage` and the API do, and sums them.
type Gateways struct {
	URLs []string
}

// Tokens implements TokenSource. The gateways count per key and hour, and list the jobs a key
// called: a key's hour is recorded under its job when it called one job, and under no job when
// it called several (its tokens are then in the key's and the tenant's sums, not a job's).
func (g Gateways) Tokens(ctx context.Context, from, to time.Time) ([]TokenCount, error) {
	q := url.Values{"since": {from.UTC().Format(time.RFC3339)}, "until": {to.UTC().Format(time.RFC3339)}}
	lists := make([][]usage.KeyUsage, len(g.URLs))
	eg, ectx := errgroup.WithContext(ctx)
	for i, u := range g.URLs {
		eg.Go(func() error {
			rep, err := gateway.Client{BaseURL: u}.Usage(ectx, q)
			lists[i] = rep.Keys
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	var out []TokenCount
	for _, k := range usage.MergeUsage(lists...) {
		job := ""
		if len(k.Endpoints) == 1 {
			job = k.Endpoints[0]
		}
		for _, h := range k.Hours {
			out = append(out, TokenCount{Tenant: k.Tenant, Key: k.KeyID, Job: job, Hour: h.Hour,
				Requests: h.Requests, TokensIn: h.TokensIn, TokensOut: h.TokensOut})
		}
	}
	return out, nil
}
