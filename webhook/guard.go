package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
)

// MaxRequestBytes is the largest AdmissionReview body the webhook reads: 7 MiB. The API server
// takes a write request of at most 3 MiB (its MaxRequestBodyBytes), so one object it sends is
// at most about that; an UPDATE carries two (the object and the old object), and the envelope
// (user info, options) stays well under 1 MiB. Etcd refuses to store objects over 1.5 MiB by
// default, so nothing larger is a request worth deciding. controller-runtime caps its own read
// at the same 7 MiB for the same reasons; the guard answers anything larger before reading it.
const MaxRequestBytes int64 = 7 << 20

// DefaultDecodeBudget is how many bytes of request bodies the webhook reads and decodes at
// once: two maximal requests, or hundreds of ordinary ones (a VirtualMachine's review is a few
// KiB). docs/webhook.md gives the heap this bound holds the server to.
const DefaultDecodeBudget = 2 * MaxRequestBytes

// minRequestWeight is what even a tiny request counts against the budget: its decoding
// allocates more than its body.
const minRequestWeight = 64 << 10

// DefaultBodyTimeout bounds the time a request may take to deliver its body: the API server
// waits at most 30 s for a decision, so a body still arriving after that is an attacker
// holding a share of the budget.
const DefaultBodyTimeout = 10 * time.Second

// GuardOptions configure a Guard; zero values take the defaults above.
type GuardOptions struct {
	MaxRequestBytes int64
	DecodeBudget    int64
	BodyTimeout     time.Duration
	Metrics         *Metrics
}

// Guard stands in front of the admission handlers and bounds the memory a flood of requests,
// or a few huge ones, can take: a body over MaxRequestBytes is refused unread (413); a request
// that would take the bytes being read and decoded past the budget is refused at once (429),
// not queued; and only an admission.k8s.io/v1 AdmissionReview with a request goes on
// (anything else: 400). Refusals are errored AdmissionReviews, which the API server treats as
// a failed call (the configuration fails closed).
type Guard struct {
	max     int64
	budget  *semaphore.Weighted
	timeout time.Duration
	metrics *Metrics
}

// NewGuard returns a Guard with o's limits.
func NewGuard(o GuardOptions) *Guard {
	g := &Guard{max: o.MaxRequestBytes, timeout: o.BodyTimeout, metrics: o.Metrics}
	if g.max <= 0 {
		g.max = MaxRequestBytes
	}
	if g.timeout <= 0 {
		g.timeout = DefaultBodyTimeout
	}
	budget := o.DecodeBudget
	if budget <= 0 {
		budget = DefaultDecodeBudget
	}
	g.budget = semaphore.NewWeighted(max(budget, g.max))
	return g
}

// Reasons a request is refused, the "reason" label of inferplane_webhook_refused_total.
const (
	RefusedTooLarge = "too_large"
	RefusedBusy     = "busy"
	RefusedEnvelope = "envelope"
	RefusedBody     = "body"
)

// Wrap puts the guard in front of next, which gets the body already read.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > g.max {
			g.refuse(w, "", RefusedTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body of %d bytes is over the webhook's limit of %d", r.ContentLength, g.max))
			return
		}
		weight := r.ContentLength
		if weight < 0 { // not announced: it may be as large as the limit
			weight = g.max
		}
		weight = max(weight, minRequestWeight)
		if !g.budget.TryAcquire(weight) {
			g.refuse(w, "", RefusedBusy, http.StatusTooManyRequests,
				"the webhook is reading and deciding as many bytes of requests as it may at once; retry")
			return
		}
		defer g.budget.Release(weight)

		body, err := g.read(w, r)
		if err != nil {
			code := http.StatusBadRequest
			reason := RefusedBody
			if errors.Is(err, errTooLarge) {
				code, reason = http.StatusRequestEntityTooLarge, RefusedTooLarge
			}
			g.refuse(w, "", reason, int32(code), err.Error())
			return
		}
		if uid, err := checkEnvelope(body); err != nil {
			g.refuse(w, uid, RefusedEnvelope, http.StatusBadRequest, err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

var errTooLarge = errors.New("request body is over the webhook's limit")

// read reads the whole body, within the time limit: into one buffer of its announced size (the
// server stops at that length), or, unannounced, up to the limit.
func (g *Guard) read(w http.ResponseWriter, r *http.Request) (_ []byte, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, errors.New("request body is empty")
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.timeout)) // not every ResponseWriter supports it
	// The deadline is lifted only for a body read whole: after a failed read it stays, so that
	// the server, which reads what is left of a body before it reuses a connection, gives up
	// on a slow sender at once and closes the connection instead of reading on without end.
	defer func() {
		if err == nil {
			_ = rc.SetReadDeadline(time.Time{})
		}
	}()
	if r.ContentLength < 0 { // not announced: read up to the limit
		body, err := io.ReadAll(io.LimitReader(r.Body, g.max+1))
		switch {
		case int64(len(body)) > g.max:
			return nil, fmt.Errorf("%w of %d bytes", errTooLarge, g.max)
		case err != nil:
			return nil, fmt.Errorf("read the request body: %w", err)
		}
		return body, nil
	}
	// One buffer of the announced size (a growing one would double near its end).
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	return body, nil
}

// checkEnvelope accepts an admission.k8s.io/v1 AdmissionReview that carries a request with a
// uid, and nothing else: controller-runtime's decoder would take other versions and kinds, and
// read a request out of them. Duplicate keys are refused, so no two readers can see different
// envelopes in the same bytes. The uid is returned when it was read, for the errored review.
func checkEnvelope(body []byte) (types.UID, error) {
	var env struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    *struct {
			UID types.UID `json:"uid"`
		} `json:"request"`
	}
	strict, err := kjson.UnmarshalStrict(body, &env, kjson.DisallowDuplicateFields)
	var uid types.UID
	if env.Request != nil {
		uid = env.Request.UID
	}
	want := admissionv1.SchemeGroupVersion.String()
	switch {
	case err != nil:
		return uid, fmt.Errorf("the body is not an AdmissionReview: %w", err)
	case len(strict) > 0:
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return uid, fmt.Errorf("the AdmissionReview is ambiguous: %s", strings.Join(msgs, "; "))
	case env.APIVersion != want || env.Kind != "AdmissionReview":
		return uid, fmt.Errorf("apiVersion %q, kind %q: the webhook answers only apiVersion %s, kind AdmissionReview",
			env.APIVersion, env.Kind, want)
	case env.Request == nil || env.Request.UID == "":
		return uid, errors.New("the AdmissionReview carries no request with a uid")
	}
	return uid, nil
}

// refuse answers with an errored AdmissionReview (HTTP 200, as controller-runtime answers the
// requests it cannot decode: the API server reads the review's status).
func (g *Guard) refuse(w http.ResponseWriter, uid types.UID, reason string, code int32, msg string) {
	g.metrics.refused(reason)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: uid, Allowed: false,
			Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}
