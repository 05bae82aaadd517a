package access

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// DefaultGroupsClaim is the claim that carries a caller's groups unless configured otherwise.
const DefaultGroupsClaim = "groups"

// VerifierConfig says which provider and client a Verifier accepts tokens for.
type VerifierConfig struct {
	// Issuer is the provider's issuer URL, exactly as its tokens' iss claim says it; the
	// discovery document is read from Issuer + "/.well-known/openid-configuration".
	Issuer string
	// ClientID is the audience a token must carry (the API's OIDC client).
	ClientID string
	// GroupsClaim names the claim with the caller's groups (DefaultGroupsClaim when empty):
	// a list of strings, or one string.
	GroupsClaim string
	// HTTPClient fetches the discovery document and the keys; nil: one with a 10 s timeout.
	HTTPClient *http.Client
	// Now is the clock expiry is checked against; nil: time.Now.
	Now func() time.Time
	// RetryDiscovery is how long a failed discovery is remembered before the next request
	// tries again (so a provider that is down is not asked on every request); 0: 5 s.
	RetryDiscovery time.Duration
}

// Verifier checks bearer tokens. Discovery happens on first use, not at construction, so an API
// server starts (and answers what needs no sign-in) while its provider is still coming up.
// Safe for concurrent use.
type Verifier struct {
	cfg VerifierConfig

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier // nil until discovery succeeds
	failedAt time.Time
	lastErr  error
}

// NewVerifier checks the configuration; it reaches no network.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	var errs []error
	if cfg.Issuer == "" {
		errs = append(errs, errors.New("the OIDC issuer URL is empty (--oidc-issuer)"))
	} else if !strings.HasPrefix(cfg.Issuer, "https://") && !strings.HasPrefix(cfg.Issuer, "http://") {
		errs = append(errs, fmt.Errorf("the OIDC issuer %q is not an http(s) URL", cfg.Issuer))
	}
	if cfg.ClientID == "" {
		errs = append(errs, errors.New("the OIDC client id is empty (--oidc-client-id): tokens are checked to be issued for it"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.RetryDiscovery == 0 {
		cfg.RetryDiscovery = 5 * time.Second
	}
	return &Verifier{cfg: cfg}, nil
}

// ErrProviderUnavailable wraps a failed discovery: the token could not be checked (a 503, not
// a 401: the caller did nothing wrong).
var ErrProviderUnavailable = errors.New("the identity provider cannot be reached")

// ErrNoToken is a request without a bearer token.
var ErrNoToken = errors.New("no bearer token: sign in and send Authorization: Bearer <token>")

// Why a token was refused, as TokenError.Kind.
const (
	Malformed     = "malformed"      // not a signed JWT, or signed with an algorithm not accepted (alg none)
	BadSignature  = "bad-signature"  // no key of the provider verifies it
	WrongIssuer   = "wrong-issuer"   // issued by another provider
	WrongAudience = "wrong-audience" // issued for another client
	Expired       = "expired"
	Invalid       = "invalid" // anything else about its claims
)

// TokenError is a token that is not acceptable: a 401.
type TokenError struct {
	Kind string
	Err  error
}

func (e *TokenError) Error() string { return "token refused (" + e.Kind + "): " + e.Err.Error() }
func (e *TokenError) Unwrap() error { return e.Err }

// Ready runs discovery now (it otherwise runs on the first Verify): for a readiness check, or a
// start-up log line saying the provider was found.
func (v *Verifier) Ready(ctx context.Context) error {
	_, err := v.idVerifier(ctx)
	return err
}

func (v *Verifier) idVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	now := time.Now()
	if v.lastErr != nil && now.Sub(v.failedAt) < v.cfg.RetryDiscovery {
		return nil, v.lastErr
	}
	// The provider's key set keeps this context's client for its later fetches (go-oidc ignores
	// its cancellation), so it is a background one, not the request's.
	bg := oidc.ClientContext(context.Background(), v.cfg.HTTPClient)
	dctx, cancel := context.WithTimeout(bg, cmp.Or(v.cfg.HTTPClient.Timeout, 10*time.Second))
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // a request that gives up stops its discovery
	defer stop()
	p, err := oidc.NewProvider(dctx, v.cfg.Issuer)
	if err != nil {
		v.failedAt, v.lastErr = now, fmt.Errorf("%w: discovery at %s: %v", ErrProviderUnavailable, v.cfg.Issuer, err)
		return nil, v.lastErr
	}
	v.verifier = p.VerifierContext(bg, &oidc.Config{ClientID: v.cfg.ClientID, Now: v.cfg.Now})
	v.lastErr = nil
	return v.verifier, nil
}

// claims are the standard claims an Identity is made of; the groups claim is read apart.
type claims struct {
	Email             string `json:"email"`
	EmailVerified     *bool  `json:"email_verified"`
	Name              string `json:"name"`
	PreferredUsername string `json:"preferred_username"`
}

// Verify checks a raw token (signature by the provider's current keys, issuer, audience,
// expiry) and returns who it names. Errors: ErrNoToken, a *TokenError (401), or one wrapping
// ErrProviderUnavailable (503).
func (v *Verifier) Verify(ctx context.Context, raw string) (Identity, error) {
	if raw == "" {
		return Identity{}, ErrNoToken
	}
	// A token another issuer signed is refused before its key id could make us fetch keys.
	if iss, ok := unverifiedIssuer(raw); ok && iss != v.cfg.Issuer {
		return Identity{}, &TokenError{WrongIssuer, fmt.Errorf("issued by %q, expected %q", iss, v.cfg.Issuer)}
	}
	iv, err := v.idVerifier(ctx)
	if err != nil {
		return Identity{}, err
	}
	tok, err := iv.Verify(ctx, raw)
	if err != nil {
		return Identity{}, classify(err)
	}
	var c claims
	if err := tok.Claims(&c); err != nil {
		return Identity{}, &TokenError{Invalid, err}
	}
	var all map[string]json.RawMessage
	if err := tok.Claims(&all); err != nil {
		return Identity{}, &TokenError{Invalid, err}
	}
	groups, err := stringList(all[v.cfg.GroupsClaim])
	if err != nil {
		return Identity{}, &TokenError{Invalid, fmt.Errorf("claim %q: %w", v.cfg.GroupsClaim, err)}
	}
	id := Identity{
		Issuer: tok.Issuer, Subject: tok.Subject, Email: c.Email,
		// Providers that say nothing about verification (email_verified absent) are not trusted
		// with it: an address names a user only when the provider vouches for it.
		EmailVerified: c.EmailVerified != nil && *c.EmailVerified,
		Name:          c.Name, Groups: groups,
	}
	if id.Name == "" {
		id.Name = c.PreferredUsername
	}
	return id, nil
}

// stringList reads a claim that is a list of strings or one string; absent or null is none.
func stringList(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err != nil {
		return nil, errors.New("expected a list of strings or a string")
	}
	return []string{one}, nil
}

// unverifiedIssuer reads the iss claim of a JWT without checking anything (false when it is
// not a JWT): only to refuse early what the signature check would refuse anyway.
func unverifiedIssuer(raw string) (string, bool) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if json.Unmarshal(payload, &c) != nil || c.Iss == "" {
		return "", false
	}
	return c.Iss, true
}

// classify names why go-oidc refused a token. go-oidc types only expiry; the others are told
// apart by its messages, which the tests pin against a real provider.
func classify(err error) *TokenError {
	var exp *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &exp):
		return &TokenError{Expired, err}
	case strings.Contains(msg, "malformed jwt"), strings.Contains(msg, "not signed"), strings.Contains(msg, "multiple signatures"):
		return &TokenError{Malformed, err}
	case strings.Contains(msg, "failed to verify signature"):
		return &TokenError{BadSignature, err}
	case strings.Contains(msg, "issued by a different provider"):
		return &TokenError{WrongIssuer, err}
	case strings.Contains(msg, "expected audience"):
		return &TokenError{WrongAudience, err}
	}
	return &TokenError{Invalid, err}
}

// BearerToken reads the token of an `Authorization: Bearer <token>` header ("" when there is
// none or the scheme is another).
func BearerToken(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Challenge is the WWW-Authenticate value of a 401 for err (RFC 6750): a bare challenge when
// no token was sent, invalid_token with the reason's kind otherwise.
func Challenge(realm string, err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return fmt.Sprintf(`Bearer realm=%q, error="invalid_token", error_description=%q`, realm, "token "+te.Kind)
	}
	return fmt.Sprintf("Bearer realm=%q", realm)
}
