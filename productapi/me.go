package productapi

import (
	"context"
	"net/http"

	"github.com/inferplane/inferplane/productapi/apiv1"
)

func (s *Server) getMe(ctx context.Context, _ *struct{}) (*body[apiv1.Me], error) {
	id := identity(ctx)
	v := s.current()
	if v == nil {
		return nil, withRetry(newProblem(http.StatusServiceUnavailable, "the inputs repository has not been fetched yet"))
	}
	ts, err := s.tenants(v)
	if err != nil {
		return nil, s.internal("listing tenants", err)
	}
	me := apiv1.Me{Issuer: id.Issuer, Subject: id.Subject, Email: id.Email, EmailVerified: id.EmailVerified, Name: id.Name,
		Groups: append([]string{}, id.Groups...), Operator: s.opts.Policy.IsOperator(id), Tenants: []apiv1.Membership{}}
	for _, m := range s.opts.Policy.Memberships(id, ts) {
		me.Tenants = append(me.Tenants, apiv1.Membership{Tenant: m.Tenant, Role: string(m.Role)})
	}
	return &body[apiv1.Me]{Body: me}, nil
}

func (s *Server) getSignIn(context.Context, *struct{}) (*body[apiv1.SignIn], error) {
	if s.opts.SignIn.Issuer == "" {
		return nil, newProblem(http.StatusNotFound, "this API server does not say how to sign in (it runs with a verifier of its own)")
	}
	return &body[apiv1.SignIn]{Body: s.opts.SignIn}, nil
}
