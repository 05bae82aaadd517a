package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inferplane/inferplane/internal/serve/servetest"
	pt "github.com/inferplane/inferplane/policy/policytest"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/webhooktest"
)

// Only an admission.k8s.io/v1 AdmissionReview is answered: another version, another kind or an
// envelope with two apiVersion keys wrapping a valid request is refused with code 400 and the
// request's uid, never allowed.
func TestGuardEnvelope(t *testing.T) {
	mux := webhooktest.Mux(t, pt.Store(), nil, nil)
	valid := string(reviewBody(t, request(t, admissionv1.Create, pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100()), nil)))
	require.True(t, post(t, mux, "/validate/virtualmachines", "application/json", []byte(valid)).Allowed, "the valid review is allowed")
	cases := map[string]string{
		"another version":        strings.Replace(valid, `"apiVersion":"admission.k8s.io/v1"`, `"apiVersion":"admission.k8s.io/v9"`, 1),
		"v1beta1":                strings.Replace(valid, `"apiVersion":"admission.k8s.io/v1"`, `"apiVersion":"admission.k8s.io/v1beta1"`, 1),
		"another kind":           strings.Replace(valid, `"kind":"AdmissionReview"`, `"kind":"Pod"`, 1),
		"no apiVersion":          strings.Replace(valid, `"apiVersion":"admission.k8s.io/v1",`, ``, 1),
		"apiVersion twice":       strings.Replace(valid, `"kind":"AdmissionReview"`, `"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v9"`, 1),
		"another case of a key":  strings.Replace(valid, `"apiVersion":"admission.k8s.io/v1"`, `"APIVersion":"admission.k8s.io/v1"`, 1),
		"a request without uid":  strings.Replace(valid, `"uid":"uid-1",`, ``, 1),
		"a JSON list, not a map": "[" + valid + "]",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			require.NotEqual(t, valid, body, "the case changes the envelope")
			resp := post(t, mux, "/validate/virtualmachines", "application/json", []byte(body))
			assert.False(t, resp.Allowed)
			require.NotNil(t, resp.Result)
			assert.Equal(t, int32(http.StatusBadRequest), resp.Result.Code, resp.Result.Message)
			if name != "a request without uid" && name != "a JSON list, not a map" {
				assert.Equal(t, types.UID("uid-1"), resp.UID, "the uid is echoed where it was read")
			}
		})
	}
}

// countingReader counts what is read from it.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// A body announced over the limit is refused with 413 without being read.
func TestGuardRefusesLargeBodiesUnread(t *testing.T) {
	mux := webhooktest.Mux(t, pt.Store(), nil, nil)
	body := &countingReader{}
	r := httptest.NewRequest(http.MethodPost, "/validate/virtualmachines", io.LimitReader(body, 10<<20))
	r.ContentLength = 10 << 20
	r.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, r)
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	assert.False(t, out.Response.Allowed)
	assert.Equal(t, int32(http.StatusRequestEntityTooLarge), out.Response.Result.Code)
	assert.Zero(t, body.n, "not a byte read")

	// Without a Content-Length the guard reads up to the limit and stops.
	unannounced := httptest.NewRequest(http.MethodPost, "/validate/virtualmachines", io.LimitReader(&countingReader{}, 10<<20))
	unannounced.ContentLength = -1
	unannounced.Header.Set("Content-Type", "application/json")
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, unannounced)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	assert.Equal(t, int32(http.StatusRequestEntityTooLarge), out.Response.Result.Code)
}

// A request that would take the bytes being decoded past the budget is refused at once with
// 429, not queued behind the one holding the budget; once that one is done, requests pass.
func TestGuardRefusesBeyondTheBudget(t *testing.T) {
	mux := webhooktest.Mux(t, pt.Store(), nil, webhook.NewGuard(webhook.GuardOptions{DecodeBudget: webhook.MaxRequestBytes}))
	// The guard takes its budget before it reads a byte of the body, so the slow request's
	// first read on the server says it holds the budget (a write on the client's side only says
	// the client's transport took the bytes).
	reading := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Slow") != "" {
			r.Body = &firstRead{ReadCloser: r.Body, signal: reading}
		}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	valid := reviewBody(t, request(t, admissionv1.Create, pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100()), nil))

	// A slow sender announces a maximal body and holds the whole budget while it trickles in.
	pr, pw := io.Pipe()
	slow, err := http.NewRequest(http.MethodPost, srv.URL+"/validate/virtualmachines", pr)
	require.NoError(t, err)
	slow.ContentLength = webhook.MaxRequestBytes
	slow.Header.Set("Content-Type", "application/json")
	slow.Header.Set("X-Test-Slow", "1")
	slowDone := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(slow)
		if err == nil {
			resp.Body.Close()
		}
		slowDone <- err
	}()
	_, err = pw.Write([]byte(`{"apiVersion":`))
	require.NoError(t, err)
	<-reading // the server holds the budget

	resp := postHTTP(t, srv.URL+"/validate/virtualmachines", valid)
	assert.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusTooManyRequests), resp.Result.Code, resp.Result.Message)

	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-slowDone
	// The server lets go of the budget once its handler sees the body end.
	assert.Eventually(t, func() bool { return postHTTP(t, srv.URL+"/validate/virtualmachines", valid).Allowed },
		30*time.Second, 10*time.Millisecond, "the budget is back")
}

// A review trickling in is answered once the guard's body time has passed, on a server with no
// read timeout of its own (as controller-runtime's is): the connection is closed, not read on
// after the handler (net/http reads what is left of a small body before reusing it).
func TestGuardCutsSlowSenders(t *testing.T) {
	srv := httptest.NewServer(webhooktest.Mux(t, pt.Store(), nil, webhook.NewGuard(webhook.GuardOptions{BodyTimeout: time.Second})))
	defer srv.Close()
	valid := reviewBody(t, request(t, admissionv1.Create, pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100()), nil))
	target := servetest.Target{Addr: strings.TrimPrefix(srv.URL, "http://"), Method: http.MethodPost,
		Path: "/validate/virtualmachines", ContentType: "application/json",
		Normal: func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/validate/virtualmachines", bytes.NewReader(valid))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var out admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil || !out.Response.Allowed {
				return fmt.Errorf("a valid review is not allowed: %v %+v", err, out.Response)
			}
			return nil
		}}
	// The refusal is an errored review, in HTTP 200.
	servetest.Run(t, target, servetest.Options{}, []servetest.Case{
		{Name: "slow review", Attack: servetest.SlowBody(200 * time.Millisecond), Status: []int{http.StatusOK}, Cut: true},
	})
}

// firstRead closes signal on the first Read.
type firstRead struct {
	io.ReadCloser
	signal chan struct{}
	once   sync.Once
}

func (f *firstRead) Read(p []byte) (int, error) {
	f.once.Do(func() { close(f.signal) })
	return f.ReadCloser.Read(p)
}

func postHTTP(t testing.TB, url string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.NotNil(t, out.Response)
	return out.Response
}

// heapBound is the heap the webhook process stays under while 40 clients send it maximal
// AdmissionReviews (and 10 MB ones) at once: the install's memory limit is 256 MiB, and the
// Go runtime, stacks and the informer cache need the rest.
const heapBound = 160 << 20

// 40 clients at once send the largest AdmissionReview the webhook reads (an UPDATE whose object
// and old object are a VirtualMachine bloated to 3.4 MiB each) and bodies of 10 MB, over
// loopback HTTP, several rounds each. The heap (live and not yet collected objects, sampled
// every millisecond) stays under heapBound, every answer is an AdmissionReview, and every
// maximal request is decided or refused as busy.
func TestGuardHeapUnderParallelMaximalBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED in -short: sends about 1.5 GB over loopback")
	}
	srv := httptest.NewServer(webhooktest.Mux(t, pt.Store(), nil, nil))
	defer srv.Close()
	maximal := maximalReview(t)
	require.LessOrEqual(t, int64(len(maximal)), webhook.MaxRequestBytes)
	require.Greater(t, int64(len(maximal)), webhook.MaxRequestBytes-(256<<10), "the body is within 256 KiB of the limit")
	huge := bytes.Repeat([]byte(" "), 10_000_000)

	runtime.GC()
	stop := sampleHeap()
	var mu sync.Mutex
	codes := map[int32]int{}
	var wg sync.WaitGroup
	for c := range 40 {
		wg.Go(func() {
			body := maximal
			if c%4 == 3 {
				body = huge
			}
			for range 5 {
				resp := postHTTP(t, srv.URL+"/validate/virtualmachines", body)
				code := int32(http.StatusOK)
				if resp.Result != nil {
					code = resp.Result.Code
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	max := stop()
	t.Logf("answers by code: %v; peak heap %.1f MiB (bound %d MiB)", codes, float64(max)/(1<<20), heapBound>>20)
	assert.Less(t, max, uint64(heapBound), "peak heap")
	assert.Equal(t, 50, codes[http.StatusRequestEntityTooLarge], "every 10 MB body is refused unread")
	assert.Positive(t, codes[http.StatusUnprocessableEntity], "some maximal requests were decided (denied: the bloat breaks no rule but the fixture's GPUs)")
	assert.Equal(t, 150, codes[http.StatusUnprocessableEntity]+codes[http.StatusTooManyRequests])
}

// maximalReview is an UPDATE AdmissionReview of a guarded VirtualMachine whose object and old
// object each carry a 3.4 MiB annotation: about as large as the webhook reads.
func maximalReview(t testing.TB) []byte {
	vm := pt.VM("chat", 0, 0, pt.Master("qwen-4", 4), pt.H100())
	vm.Spec.Template.Spec.Domain.Devices.GPUs = vm.Spec.Template.Spec.Domain.Devices.GPUs[:1] // a denial: decided in full
	old := vm.DeepCopy()
	fill := int(webhook.MaxRequestBytes/2) - 100<<10
	vm.Annotations = map[string]string{"bloat": strings.Repeat("x", fill)}
	old.Annotations = map[string]string{"bloat": strings.Repeat("y", fill)}
	old.Spec.Template.Spec.Domain.Devices.GPUs = nil // the spec changed: reviewed again
	return reviewBody(t, request(t, admissionv1.Update, vm, old))
}

// sampleHeap samples the heap's objects (live and not yet swept) every millisecond until stop,
// which returns the largest sample.
func sampleHeap() (stop func() uint64) {
	var max uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > max {
				max = v
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		cancel()
		<-done
		return max
	}
}
