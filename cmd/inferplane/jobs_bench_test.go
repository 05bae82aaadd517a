package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// BenchmarkJobsCreateOnCheckout is one job's change by the operator: `inferplane jobs create
// <tenant>/<job>` on a checkout of inputs of 200, 2,000 and 20,000 tenants x 10 jobs (the
// fixture apitest.FleetCache builds once), rendering, checking and committing that tenant's
// repository under out/. Its cost is what one tenant holds, not the fleet: the other tenants'
// folders are never read. make bench-generator prints it.
func BenchmarkJobsCreateOnCheckout(b *testing.B) {
	b.Setenv("INFERPLANE_CONFIG_DIR", b.TempDir()) // no context of the API: the operator's files
	for _, n := range []int{200, 2000, 20000} {
		b.Run(fmt.Sprintf("tenants=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "inputs")
			gitserver.Git(b, "", "clone", "-q", apitest.FleetCache(b, n, 10), dir)
			out := filepath.Join(b.TempDir(), "out")
			create := func(job string) {
				_, stderr, err := execCLI(context.Background(), "jobs", "create", "fleet-0042/"+job, "--model", "Qwen/Qwen3-32B",
					"--tenants", filepath.Join(dir, "tenants"), "--recipes", filepath.Join(dir, "recipes"), "--out-dir", out)
				if err != nil {
					b.Fatalf("jobs create: %v\n%s", err, strings.TrimSpace(stderr))
				}
			}
			create("first") // the tenant's repository made once: what is measured is a change to it
			i := 0
			for b.Loop() {
				i++
				create(fmt.Sprintf("bench-%d", i))
			}
		})
	}
}
