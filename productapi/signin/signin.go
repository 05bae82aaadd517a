// Package signin is how a client of the product API on a person's machine (the CLI) signs in
// to the operator's OIDC provider: the authorization-code flow with PKCE and a loopback
// redirect on 127.0.0.1 (RFC 8252, as kubelogin and `argocd login --sso` do), the device flow
// (RFC 8628) for a machine without a browser, and the refresh of an expired ID token. The ID
// token a flow gives is verified (issuer, audience, signature, nonce) before it is kept.
//
// The client is public: no secret ships with the CLI; PKCE protects the code.
package signin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/inferplane/inferplane/productapi/clientconfig"
)

// Scopes are asked for every sign-in: an ID token with the email, the name and the groups the
// API's roles read, and a refresh token.
var Scopes = []string{oidc.ScopeOpenID, "email", "profile", "groups", oidc.ScopeOfflineAccess}

// Provider is the operator's identity provider and the client the CLI signs in as.
type Provider struct {
	Issuer, ClientID string
	// HTTP is used for every call to the provider (nil: a client with a 30 s timeout).
	HTTP *http.Client

	oidc *oidc.Provider
}

// Discover reads the provider's discovery document.
func Discover(ctx context.Context, issuer, clientID string, hc *http.Client) (*Provider, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	p := &Provider{Issuer: issuer, ClientID: clientID, HTTP: hc}
	op, err := oidc.NewProvider(oidc.ClientContext(ctx, hc), issuer)
	if err != nil {
		return nil, fmt.Errorf("the identity provider %s: %w", issuer, err)
	}
	p.oidc = op
	return p, nil
}

func (p *Provider) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.HTTP)
}

func (p *Provider) config(redirect string) *oauth2.Config {
	return &oauth2.Config{ClientID: p.ClientID, Endpoint: p.oidc.Endpoint(), RedirectURL: redirect, Scopes: Scopes}
}

// tokens verifies the ID token of a token answer and keeps what the CLI needs. nonce, when
// set, must be the token's.
func (p *Provider) tokens(ctx context.Context, t *oauth2.Token, nonce string) (clientconfig.Tokens, error) {
	raw, _ := t.Extra("id_token").(string)
	if raw == "" {
		return clientconfig.Tokens{}, errors.New("the identity provider answered without an ID token (is the openid scope allowed for the client?)")
	}
	idt, err := p.oidc.VerifierContext(oidc.ClientContext(ctx, p.HTTP), &oidc.Config{ClientID: p.ClientID}).Verify(ctx, raw)
	if err != nil {
		return clientconfig.Tokens{}, fmt.Errorf("the ID token the provider gave does not verify: %w", err)
	}
	if nonce != "" && idt.Nonce != nonce {
		return clientconfig.Tokens{}, errors.New("the ID token's nonce is not the one this sign-in sent")
	}
	return clientconfig.Tokens{IDToken: raw, RefreshToken: t.RefreshToken, Expiry: idt.Expiry}, nil
}

// Refresh exchanges a refresh token for new tokens.
func (p *Provider) Refresh(ctx context.Context, refreshToken string) (clientconfig.Tokens, error) {
	t, err := p.config("").TokenSource(p.ctx(ctx), &oauth2.Token{RefreshToken: refreshToken}).Token()
	if err != nil {
		return clientconfig.Tokens{}, describe(err)
	}
	return p.tokens(ctx, t, "")
}

// Refresher is a clientconfig.Refresher discovering each context's provider.
func Refresher(hc *http.Client) clientconfig.Refresher {
	return func(ctx context.Context, c clientconfig.Context, refreshToken string) (clientconfig.Tokens, error) {
		p, err := Discover(ctx, c.Issuer, c.ClientID, hc)
		if err != nil {
			return clientconfig.Tokens{}, err
		}
		return p.Refresh(ctx, refreshToken)
	}
}

// describe words an OAuth2 error answer with the provider's own error and description.
func describe(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorCode != "" {
		msg := "the identity provider refused: " + re.ErrorCode
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		}
		return errors.New(msg)
	}
	return err
}

func random() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Who is the name a context shows for the signed-in user: the email, else the subject.
func Who(t clientconfig.Tokens) string {
	c, err := clientconfig.ParseClaims(t.IDToken)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(firstOf(c.Email, c.Name, c.Subject))
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
