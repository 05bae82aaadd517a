package apibackend_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/apibackend"
	"github.com/inferplane/inferplane/console/consoletest"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// BenchmarkJobsPageServer is the server's part of the jobs page's first render on the demo
// (make console): the console over the product API's handler in process, the bundled inputs,
// no cluster, signed in with the development sign-in; each iteration is one GET of
// /t/acme/jobs over 127.0.0.1, the page read whole. What the browser then does with it is
// BenchmarkJobsPage's (console/e2e).
func BenchmarkJobsPageServer(b *testing.B) {
	r := apitest.Remotes{Dir: b.TempDir()}
	rep := apitest.StartReplica(b, r, apitest.BundledInputs(b, r), apibackend.Verifier(refuseAll{}),
		productapi.Options{Policy: access.Policy{AdminGroups: []string{"platform-ops"}}, Domain: "inference.test"})
	srv := consoletest.Start(b, func(addr string) console.Options {
		return console.Options{Backend: apibackend.New(rep.Server.Handler()), Dev: true, ListenAddr: addr, SessionKeys: [][]byte{consoletest.Key()}}
	})
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(srv.URL+"/auth/dev", url.Values{"email": {"dana@acme.example"}, "groups": {"acme-ml"}, "next": {"/me"}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	get := func() string {
		resp, err := c.Get(srv.URL + "/t/acme/jobs")
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("GET /t/acme/jobs: %d %v", resp.StatusCode, err)
		}
		return string(body)
	}
	if page := get(); !strings.Contains(page, "qwen3-32b") {
		b.Fatalf("the page does not list acme's jobs:\n%s", page)
	}
	// CPU time (the server's and this client's, one process) beside the wall time: on a machine
	// shared with other work the wall time is mostly waiting for a CPU.
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		get()
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
