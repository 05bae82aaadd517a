package console

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/inferplane/inferplane/access"
)

// The console keeps no session store: a session is sealed (AES-256-GCM) into the cookie with a
// key every replica reads from the same file (a Kubernetes Secret mounted in each pod), so any
// replica opens the cookie another sealed, a replica can die or be added without signing
// anyone out, and there is no database to run. The cost: signing out forgets the session in
// that browser only (a copied cookie stays good until it expires), so sessions are short and
// the identity is refreshed from the provider when its ID token expires.

// Cookie names. The __Host- prefix makes the browser refuse them unless Secure, Path=/ and
// without Domain: no other host or subdomain can set or shadow them.
const (
	SessionCookie = "__Host-inferplane-session"
	loginCookie   = "__Host-inferplane-login"
)

// KeySize is the size of a session key: AES-256.
const KeySize = 32

// LoadSessionKeys reads the session keys from a file: one key per line, 32 bytes written as
// 64 hex digits or as base64 (standard or URL alphabet); blank lines and lines starting with #
// are skipped. The first key seals new cookies; every key opens them, so a key is rotated by
// putting the new one first and dropping the old one once the sessions it sealed have expired.
// `openssl rand -hex 32` makes one.
func LoadSessionKeys(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("session key file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := parseKey(line)
		if err != nil {
			return nil, fmt.Errorf("session key file %s, line %d: %w", path, i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("session key file %s holds no key (one per line: 64 hex digits, e.g. from `openssl rand -hex 32`)", path)
	}
	return keys, nil
}

func parseKey(s string) ([]byte, error) {
	if k, err := hex.DecodeString(s); err == nil && len(k) == KeySize {
		return k, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("not a %d-byte key in hex (64 digits) or base64", KeySize)
}

// sealer seals and opens cookie values with AES-256-GCM; the cookie's name is the additional
// data, so a value sealed for one cookie is refused as another.
type sealer struct {
	aeads []cipher.AEAD // [0] seals
}

func newSealer(keys [][]byte) (*sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("console: no session key (--console-session-key-file): sessions are sealed with it so that every replica can read them")
	}
	s := &sealer{}
	for i, k := range keys {
		if len(k) != KeySize {
			return nil, fmt.Errorf("console: session key %d is %d bytes, want %d", i+1, len(k), KeySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		s.aeads = append(s.aeads, aead)
	}
	return s, nil
}

func (s *sealer) seal(name string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	a := s.aeads[0]
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(a.Seal(nonce, nonce, plain, []byte(name))), nil
}

var errBadCookie = errors.New("the cookie is not one this console sealed (or its key was retired)")

func (s *sealer) open(name, value string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil {
		return errBadCookie
	}
	for _, a := range s.aeads {
		if len(raw) < a.NonceSize() {
			return errBadCookie
		}
		plain, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(name))
		if err != nil {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(plain))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return errBadCookie
		}
		return nil
	}
	return errBadCookie
}

// sessionVersion changes when the session's fields change meaning: older cookies are refused
// (the user signs in again) rather than misread.
const sessionVersion = 1

// session is what the session cookie holds, sealed.
type session struct {
	V int `json:"v"`
	// CSRF is the token every form and call that changes something must carry back
	// (synchronizer token: it lives in the sealed cookie, which pages of other sites can
	// neither read nor forge).
	CSRF string `json:"csrf"`
	// Identity is who the provider's verified ID token said the user is.
	Identity identityJSON `json:"id"`
	// Refresh is the provider's refresh token (encrypted with the rest); empty: none issued.
	Refresh string `json:"rt,omitempty"`
	// Expiry is the ID token's expiry: past it, the identity is refreshed (or the user signs
	// in again).
	Expiry time.Time `json:"exp"`
	// Created is when the user signed in: the session ends MaxAge after it, refreshed or not.
	Created time.Time `json:"iat"`
	// Dev marks a development sign-in (no provider, no refresh).
	Dev bool `json:"dev,omitempty"`
}

type identityJSON struct {
	Issuer        string   `json:"iss"`
	Subject       string   `json:"sub"`
	Email         string   `json:"email,omitempty"`
	EmailVerified bool     `json:"ev,omitempty"`
	Name          string   `json:"name,omitempty"`
	Groups        []string `json:"groups,omitempty"`
}

func toJSON(id access.Identity) identityJSON {
	return identityJSON{id.Issuer, id.Subject, id.Email, id.EmailVerified, id.Name, id.Groups}
}

func (j identityJSON) identity() access.Identity {
	return access.Identity{Issuer: j.Issuer, Subject: j.Subject, Email: j.Email, EmailVerified: j.EmailVerified, Name: j.Name, Groups: j.Groups}
}

// maxCookie is what browsers keep of one cookie (name, value and attributes): 4096 bytes.
const maxCookie = 4096

// setCookie writes a sealed cookie: HttpOnly (no script reads it), Secure, SameSite=Lax (sent
// on a top-level navigation from another site, as the provider's redirect back is, and on
// nothing else from another site: no cross-site form post carries it).
func (h *Handler) setCookie(w http.ResponseWriter, name string, v any, maxAge time.Duration) error {
	value, err := h.sealer.seal(name, v)
	if err != nil {
		return err
	}
	c := &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: int(maxAge / time.Second), HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode}
	if len(c.String()) > maxCookie {
		return fmt.Errorf("the session is %d bytes sealed, more than a browser keeps in a cookie (%d): the provider's token carries too many groups", len(c.String()), maxCookie)
	}
	http.SetCookie(w, c)
	return nil
}

func clearCookie(w http.ResponseWriter, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode})
}

// readCookie opens the named sealed cookie into v; false when absent or not ours.
func (h *Handler) readCookie(r *http.Request, name string, v any) bool {
	c, err := r.Cookie(name)
	if err != nil || c.Value == "" {
		return false
	}
	return h.sealer.open(name, c.Value, v) == nil
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("console: the system's random source failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
