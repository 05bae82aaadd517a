package productapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// bearer is the name of the OpenAPI security scheme.
const bearer = "oidc"

func init() {
	// Every error huma writes itself (a body that does not parse or fails the schema) is a
	// Problem too, so a client reads one shape; huma documents this as the way to do it.
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		p := newProblem(status, msg)
		for _, e := range errs {
			var d huma.ErrorDetailer
			if errors.As(e, &d) {
				det := d.ErrorDetail()
				p.Errors = append(p.Errors, apiv1.FieldProblem{Field: det.Location, Value: valueText(det.Value), Detail: det.Message,
					Message: strings.TrimPrefix(det.Location+": ", ": ") + det.Message})
			} else if e != nil {
				p.Errors = append(p.Errors, apiv1.FieldProblem{Detail: e.Error(), Message: e.Error()})
			}
		}
		return p
	}
}

func valueText(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func newProblem(status int, detail string) *apiv1.Problem {
	return &apiv1.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail}
}

// newAPI is the huma API on mux: OpenAPI 3.1 at /api/v1/openapi.json, no docs page (it would
// load scripts from elsewhere), no $schema links in bodies.
func (s *Server) newAPI(mux *http.ServeMux) huma.API {
	cfg := huma.DefaultConfig("inferplane product API", s.opts.Version)
	cfg.CreateHooks = nil
	cfg.OpenAPIPath = Prefix + "/openapi"
	cfg.DocsPath = ""
	cfg.SchemasPath = ""
	cfg.Info.Description = "Jobs, models, API keys, usage and endpoint health of the tenants the caller belongs to. " +
		"Sign in with an OIDC ID token (Authorization: Bearer). Every write is a git commit of the operator's inputs."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		bearer: {Type: "http", Scheme: "bearer", BearerFormat: "JWT", Description: "An OIDC ID token issued for the API's client id"},
	}
	cfg.Security = []map[string][]string{{bearer: {}}}
	api := humago.New(mux, cfg)
	api.UseMiddleware(s.jsonBodies, s.authenticate)
	s.health.AddReadyzCheck("inputs", s.inputsFetched)
	s.health.Register(mux)
	mux.Handle("GET /metrics", s.metrics.handler())
	return api
}

type ctxKey struct{}

// identity is the caller signed in for this request.
func identity(ctx context.Context) access.Identity {
	id, _ := ctx.Value(ctxKey{}).(access.Identity)
	return id
}

// authenticate verifies the bearer token of every operation that needs one (all but the
// OpenAPI document): 401 with WWW-Authenticate for none or a bad one, 503 when the identity
// provider cannot be reached.
func (s *Server) authenticate(ctx huma.Context, next func(huma.Context)) {
	op := ctx.Operation()
	if op == nil || (op.Security != nil && len(op.Security) == 0) {
		next(ctx)
		return
	}
	raw := ""
	if scheme, tok, ok := strings.Cut(ctx.Header("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		raw = strings.TrimSpace(tok)
	}
	id, err := s.opts.Verifier.Verify(ctx.Context(), raw)
	if err != nil {
		var te *access.TokenError
		switch {
		case errors.Is(err, access.ErrProviderUnavailable):
			s.log.Warn("sign-in: identity provider unavailable", "error", err)
			ctx.SetHeader("Retry-After", "5")
			_ = huma.WriteErr(s.api, ctx, http.StatusServiceUnavailable, "the identity provider cannot be reached to check the token; try again shortly")
		case errors.Is(err, access.ErrNoToken), errors.As(err, &te):
			kind := "no-token"
			if te != nil {
				kind = te.Kind
			}
			s.metrics.refusals.WithLabelValues("401", kind).Inc()
			s.log.Info("sign-in refused", "reason", kind, "path", ctx.URL().Path)
			ctx.SetHeader("WWW-Authenticate", access.Challenge(s.opts.Realm, err))
			_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, err.Error())
		default:
			_ = huma.WriteErr(s.api, ctx, http.StatusInternalServerError, "checking the token failed")
			s.log.Error("sign-in: verifying a token failed", "error", err)
		}
		return
	}
	next(huma.WithValue(ctx, ctxKey{}, id))
}

// authorize loads the request's tenant and decides whether the caller may take the action:
// 403 with the same words whether or not the tenant exists (another customer's tenant is never
// told apart from nothing); 404 only for an operator asking for a tenant that does not exist.
func (s *Server) authorize(ctx context.Context, tenant string, a access.Action) (*view, *v1alpha1.Tenant, error) {
	v := s.current()
	if v == nil {
		return nil, nil, withRetry(newProblem(http.StatusServiceUnavailable, "the inputs repository has not been fetched yet"))
	}
	t, err := s.tenantObject(v, tenant)
	if err != nil {
		return nil, nil, s.internal("read tenant "+tenant, err)
	}
	id := identity(ctx)
	d := s.opts.Policy.Decide(id, tenant, t, a)
	if !d.Allowed {
		s.metrics.refusals.WithLabelValues("403", string(a)).Inc()
		s.log.Info("request refused", "subject", id.Subject, "tenant", tenant, "action", a, "reason", d.Reason)
		return nil, nil, newProblem(http.StatusForbidden, d.Reason)
	}
	if t == nil {
		return nil, nil, newProblem(http.StatusNotFound, fmt.Sprintf("no tenant %q in the inputs", tenant))
	}
	return v, t, nil
}

func validName(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// retryAfter is a Problem that asks the client to retry.
type retryAfter struct{ *apiv1.Problem }

func (r retryAfter) GetHeaders() http.Header { return http.Header{"Retry-After": {"1"}} }
func (r retryAfter) Unwrap() error           { return r.Problem }

func withRetry(p *apiv1.Problem) error { return retryAfter{p} }

// internal logs an unexpected error and answers 500 without its details (they may name
// internal addresses).
func (s *Server) internal(what string, err error) error {
	s.log.Error(what, "error", err)
	return newProblem(http.StatusInternalServerError, what+" failed; the server's log says why")
}

// writeProblem maps the git write path's errors to answers: a change that no longer applies
// is 409, the generator's refusal 422 with its problems, a reused idempotency key 422, a
// branch that kept moving 503.
func (s *Server) writeProblem(err error) error {
	var (
		ce *inputsrepo.ConflictError
		ck *inputsrepo.CheckError
		kr *inputsrepo.KeyReusedError
	)
	switch {
	case errors.As(err, &ce):
		return newProblem(http.StatusConflict, ce.Reason)
	case errors.As(err, &ck):
		return refusal(ck.Err)
	case errors.As(err, &kr):
		return newProblem(http.StatusUnprocessableEntity, kr.Error())
	case errors.Is(err, inputsrepo.ErrBusy):
		return withRetry(newProblem(http.StatusServiceUnavailable, err.Error()))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return newProblem(http.StatusServiceUnavailable, "the request ended before the write finished; retry it with the same Idempotency-Key to learn whether it landed")
	}
	var p *apiv1.Problem
	if errors.As(err, &p) {
		return p
	}
	return s.internal("writing the inputs", err)
}

// refusal is a 422 carrying the generator's problems: file, field path and its words.
func refusal(err error) *apiv1.Problem {
	p := newProblem(http.StatusUnprocessableEntity, "refused by the rules generate applies; nothing was committed")
	probs := problem.Problems(err)
	if len(probs) == 0 {
		p.Errors = []apiv1.FieldProblem{{Detail: err.Error(), Message: err.Error()}}
		return p
	}
	for _, pr := range probs {
		p.Errors = append(p.Errors, apiv1.FieldProblem{File: pr.File, Field: pr.Err.Field, Type: string(pr.Err.Type),
			Value: fielderr.Value(pr.Err), Detail: pr.Err.Detail, Message: pr.Error()})
	}
	return p
}

// fieldProblems is a 422 of request fields (field.ErrorList, e.g. keys.Request.Check).
func fieldProblems(errs field.ErrorList) *apiv1.Problem {
	p := newProblem(http.StatusUnprocessableEntity, "the request is not valid")
	for _, e := range errs {
		p.Errors = append(p.Errors, apiv1.FieldProblem{Field: "body." + e.Field, Type: string(e.Type), Value: fielderr.Value(e),
			Detail: e.Detail, Message: fielderr.Describe(e)})
	}
	return p
}
