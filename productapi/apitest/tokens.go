package apitest

import (
	"context"
	"errors"

	"github.com/inferplane/inferplane/access"
)

// Tokens is a verifier of made-up tokens, each the identity it names: for the tests of what
// happens once signed in (the sign-in itself is tested against a real Dex).
type Tokens map[string]access.Identity

// Verify implements productapi.Verifier.
func (v Tokens) Verify(_ context.Context, raw string) (access.Identity, error) {
	if raw == "" {
		return access.Identity{}, access.ErrNoToken
	}
	if id, ok := v[raw]; ok {
		return id, nil
	}
	return access.Identity{}, &access.TokenError{Kind: access.BadSignature, Err: errors.New("unknown test token")}
}
