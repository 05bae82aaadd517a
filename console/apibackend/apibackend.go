// Package apibackend is the console's Backend on the product API: the API's typed client
// (productapi/client) calling the API's own handler in the same process, as the signed-in
// user. Every read and write goes through the operations the CLI calls (the same roles, the
// same validation, the same problem details, the same metrics); nothing leaves the process and
// no token travels: the console's verified identity rides in the request's context, and
// Verifier hands it to the API's sign-in step for those requests only.
package apibackend

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/client"
)

// idKey carries the caller of an in-process request. A request from the network cannot hold a
// value of this package's type in its context, so only the console's calls are signed in so.
type idKey struct{}

// Verifier is the API's verifier with the console's callers let in: an in-process request
// carries the identity the console verified (its OIDC sign-in, or the development sign-in on
// 127.0.0.1), any other request is verified by next (the bearer token); next nil refuses
// every token (a server with the development sign-in only).
func Verifier(next productapi.Verifier) productapi.Verifier { return verifier{next} }

type verifier struct{ next productapi.Verifier }

func (v verifier) Verify(ctx context.Context, raw string) (access.Identity, error) {
	if id, ok := ctx.Value(idKey{}).(access.Identity); ok {
		return id, nil
	}
	if v.next == nil {
		return access.Identity{}, errNoProvider
	}
	return v.next.Verify(ctx, raw)
}

// errNoProvider refuses bearer tokens when the API runs with the console's development
// sign-in only (no identity provider to check them with).
var errNoProvider = &access.TokenError{Kind: "no-provider",
	Err: errors.New("this server runs without an identity provider (--console-dev): only the console on 127.0.0.1 signs in")}

// Backend is the console's Backend on the product API's handler.
type Backend struct {
	c   *client.Client
	now func() time.Time
}

// New is a Backend calling api (productapi.Server.Handler()) in process; api's verifier must
// be wrapped by Verifier.
func New(api http.Handler) *Backend {
	c := client.New("http://in-process", nil)
	c.HTTP = &http.Client{Transport: inProcess{api}}
	c.Retries = -1 // a 503 is shown to the user, who may try again
	return &Backend{c: c, now: time.Now}
}

// as is ctx carrying the caller for the API.
func as(ctx context.Context, id access.Identity) context.Context {
	return context.WithValue(ctx, idKey{}, id)
}

var _ console.Backend = (*Backend)(nil)
