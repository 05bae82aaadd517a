package signin

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/oauth2"

	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/productapi/clientconfig"
)

// Browser opens a URL for the person signing in (a browser, or a message saying where to go).
type Browser func(ctx context.Context, url string) error

// LoopbackOptions shape the authorization-code flow.
type LoopbackOptions struct {
	// Port is the loopback port the redirect comes back to (0: one the kernel picks; a
	// provider whose client registers a fixed redirect URI needs that one).
	Port int
	// Open shows the authorization URL to the person.
	Open Browser
	// Timeout bounds the wait for the browser (0: 5 minutes).
	Timeout time.Duration
	// Bounds bound the listener against slow and hostile local clients (zero fields:
	// serve.LoopbackHTTP).
	Bounds serve.HTTP
}

// callbackPath is where the provider sends the browser back to, on 127.0.0.1.
const callbackPath = "/callback"

// AuthCode signs in with the authorization-code flow and PKCE: a listener on 127.0.0.1 takes
// the redirect (only on loopback: nothing on the network can answer it), the state and the
// nonce are checked, and the code is exchanged with the PKCE verifier.
func (p *Provider) AuthCode(ctx context.Context, o LoopbackOptions) (clientconfig.Tokens, error) {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	bounds := o.Bounds.Over(serve.LoopbackHTTP())
	l, err := bounds.Listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)))
	if err != nil {
		return clientconfig.Tokens{}, fmt.Errorf("listening on 127.0.0.1 for the sign-in's redirect: %w", err)
	}
	defer l.Close()
	redirect := "http://" + l.Addr().String() + callbackPath
	cfg := p.config(redirect)
	verifier, state, nonce := oauth2.GenerateVerifier(), random(), random()
	authURL := cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce))

	got := make(chan callbackResult, 1)
	srv := bounds.Server(callback(state, got))
	go func() { _ = srv.Serve(l) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	if err := o.Open(ctx, authURL); err != nil {
		return clientconfig.Tokens{}, err
	}
	wait, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var res callbackResult
	select {
	case res = <-got:
	case <-wait.Done():
		return clientconfig.Tokens{}, fmt.Errorf("no answer from the browser within %s: %w", o.Timeout, wait.Err())
	}
	if res.err != nil {
		return clientconfig.Tokens{}, res.err
	}
	t, err := cfg.Exchange(p.ctx(ctx), res.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return clientconfig.Tokens{}, describe(err)
	}
	return p.tokens(ctx, t, nonce)
}

// callbackResult is what the provider's redirect brought: a code, or why there is none.
type callbackResult struct {
	code string
	err  error
}

// callback takes the provider's redirect to callbackPath: the first that carries state goes
// to got, and the browser is told how the sign-in went.
func callback(state string, got chan<- callbackResult) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != callbackPath {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		var res callbackResult
		switch {
		case q.Get("state") != state:
			// Not this sign-in's answer (a stale tab, or a page trying its luck): ignored.
			http.Error(w, "this is not the answer of the sign-in under way", http.StatusBadRequest)
			return
		case q.Get("error") != "":
			res.err = fmt.Errorf("the identity provider refused the sign-in: %s %s", q.Get("error"), q.Get("error_description"))
		case q.Get("code") == "":
			res.err = errors.New("the identity provider sent no code")
		default:
			res.code = q.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if res.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<p>Sign-in failed: %s</p>", html.EscapeString(res.err.Error()))
		} else {
			fmt.Fprint(w, "<p>Signed in to inferplane. You can close this tab and go back to the terminal.</p>")
		}
		select {
		case got <- res:
		default:
		}
	})
}

// DevicePrompt tells the person where to go and which code to enter.
type DevicePrompt func(verificationURI, verificationURIComplete, userCode string) error

// ErrNoDeviceFlow is a provider whose discovery lists no device authorization endpoint.
var ErrNoDeviceFlow = errors.New("the identity provider offers no device flow (no device_authorization_endpoint in its discovery document): sign in without --device")

// Device signs in with the device flow: the provider gives a code the person enters at its
// verification page (on any device), while this polls the token endpoint.
func (p *Provider) Device(ctx context.Context, prompt DevicePrompt) (clientconfig.Tokens, error) {
	cfg := p.config("")
	if cfg.Endpoint.DeviceAuthURL == "" {
		return clientconfig.Tokens{}, ErrNoDeviceFlow
	}
	da, err := cfg.DeviceAuth(p.ctx(ctx))
	if err != nil {
		return clientconfig.Tokens{}, describe(err)
	}
	if err := prompt(da.VerificationURI, da.VerificationURIComplete, da.UserCode); err != nil {
		return clientconfig.Tokens{}, err
	}
	t, err := cfg.DeviceAccessToken(p.ctx(ctx), da)
	if err != nil {
		return clientconfig.Tokens{}, describe(err)
	}
	return p.tokens(ctx, t, "")
}
