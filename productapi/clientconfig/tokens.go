package clientconfig

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Tokens are what a sign-in gave: the ID token the API takes as its bearer token, the refresh
// token that gets a new one, and when the ID token expires.
type Tokens struct {
	IDToken      string    `json:"idToken"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Expiry       time.Time `json:"expiry"`
}

// ErrNotSignedIn is a context without tokens (never signed in, or signed out).
var ErrNotSignedIn = errors.New("not signed in")

func (s *Store) tokenFile(name string) string {
	return filepath.Join(s.Dir, "tokens", fileName(name)+".json")
}

// Tokens reads a context's tokens.
func (s *Store) Tokens(name string) (Tokens, error) {
	data, err := os.ReadFile(s.tokenFile(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Tokens{}, ErrNotSignedIn
	}
	if err != nil {
		return Tokens{}, err
	}
	var t Tokens
	if err := json.Unmarshal(data, &t); err != nil || t.IDToken == "" {
		return Tokens{}, fmt.Errorf("%s is not a token cache the CLI wrote (sign in again): %v", s.tokenFile(name), err)
	}
	return t, nil
}

// SaveTokens writes a context's tokens (mode 0600, atomically).
func (s *Store) SaveTokens(name string, t Tokens) error {
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(s.tokenFile(name), data)
}

// DeleteTokens removes a context's tokens; none is no error.
func (s *Store) DeleteTokens(name string) error {
	err := os.Remove(s.tokenFile(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// locked runs fn holding an exclusive lock on the context's tokens, so that two commands
// refreshing at once use the refresh token once (providers such as Dex rotate it: the second
// use of an old one is refused).
func (s *Store) locked(name string, fn func() error) error {
	lock := s.tokenFile(name) + ".lock"
	if err := os.MkdirAll(filepath.Dir(lock), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", lock, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too
	return fn()
}

// Refresher exchanges a refresh token for new tokens at the context's provider.
type Refresher func(ctx context.Context, c Context, refreshToken string) (Tokens, error)

// Leeway is how long before its expiry an ID token is refreshed: the server must still find it
// valid when the request arrives.
const Leeway = 30 * time.Second

// NotSignedInError says how to sign in to a context.
type NotSignedInError struct {
	Context Context
	Reason  string
}

func (e *NotSignedInError) Error() string {
	return fmt.Sprintf("%s for context %s: run `inferplane login %s`", e.Reason, e.Context.Name, e.Context.Server)
}

// TokenSource gives the context's ID token, refreshing it (and saving the new tokens) when it
// expires within Leeway. Its signature is productapi/client's TokenSource.
func (s *Store) TokenSource(c Context, refresh Refresher, now func() time.Time) func(context.Context) (string, error) {
	if now == nil {
		now = time.Now
	}
	return func(ctx context.Context) (string, error) {
		t, err := s.Tokens(c.Name)
		if errors.Is(err, ErrNotSignedIn) {
			return "", &NotSignedInError{Context: c, Reason: "not signed in"}
		}
		if err != nil {
			return "", err
		}
		if now().Add(Leeway).Before(t.Expiry) {
			return t.IDToken, nil
		}
		var tok string
		err = s.locked(c.Name, func() error {
			// Another command may have refreshed while this one waited for the lock.
			t, err := s.Tokens(c.Name)
			if err != nil {
				return err
			}
			if now().Add(Leeway).Before(t.Expiry) {
				tok = t.IDToken
				return nil
			}
			if t.RefreshToken == "" {
				return &NotSignedInError{Context: c, Reason: "the sign-in expired at " + t.Expiry.UTC().Format(time.RFC3339) + " and no refresh token was given"}
			}
			nt, err := refresh(ctx, c, t.RefreshToken)
			if err != nil {
				return &NotSignedInError{Context: c, Reason: "the sign-in expired and refreshing it failed (" + err.Error() + ")"}
			}
			if nt.RefreshToken == "" {
				nt.RefreshToken = t.RefreshToken
			}
			if err := s.SaveTokens(c.Name, nt); err != nil {
				return err
			}
			tok = nt.IDToken
			return nil
		})
		return tok, err
	}
}

// Claims are what the CLI reads from an ID token without verifying it (the API verifies it):
// when it expires and who it names.
type Claims struct {
	Expiry        time.Time
	Subject       string
	Email, Name   string
	Issuer        string
	Audience      []string
	EmailVerified bool
}

// ParseClaims reads an ID token's payload.
func ParseClaims(idToken string) (Claims, error) {
	parts := strings.Split(idToken, ".")
	if len(parts) != 3 {
		return Claims{}, errors.New("the ID token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return Claims{}, fmt.Errorf("the ID token's payload: %w", err)
	}
	var raw struct {
		Exp           int64           `json:"exp"`
		Sub           string          `json:"sub"`
		Email         string          `json:"email"`
		Name          string          `json:"name"`
		Iss           string          `json:"iss"`
		Aud           json.RawMessage `json:"aud"`
		EmailVerified bool            `json:"email_verified"`
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		return Claims{}, fmt.Errorf("the ID token's payload: %w", err)
	}
	c := Claims{Expiry: time.Unix(raw.Exp, 0), Subject: raw.Sub, Email: raw.Email, Name: raw.Name, Issuer: raw.Iss, EmailVerified: raw.EmailVerified}
	var one string
	if json.Unmarshal(raw.Aud, &one) == nil {
		c.Audience = []string{one}
	} else {
		_ = json.Unmarshal(raw.Aud, &c.Audience)
	}
	if raw.Exp == 0 {
		return c, errors.New("the ID token has no expiry (exp)")
	}
	return c, nil
}
