package dex

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Scopes are the scopes the harness asks for: an ID token with the email, the name and the
// groups.
var Scopes = []string{"openid", "email", "profile", "groups"}

// Tokens is a token endpoint's answer.
type Tokens struct {
	IDToken      string `json:"id_token"`
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
}

// PasswordGrant signs a static user in with the resource-owner password grant, as a CLI or a
// script holding the user's password would: the client authenticates with its secret.
func (d *Dex) PasswordGrant(ctx context.Context, c Client, email, password string) (Tokens, error) {
	form := url.Values{
		"grant_type": {"password"},
		"username":   {email},
		"password":   {password},
		"scope":      {strings.Join(Scopes, " ")},
	}
	return d.token(ctx, c, form)
}

// ProxyLogin is who an authenticating proxy in front of Dex says the user is (the authproxy
// connector's headers).
type ProxyLogin struct {
	User, Email string
	Groups      []string
}

// PasswordLogin is a static user typing its email and password into Dex's login form.
type PasswordLogin struct {
	Email, Password string
}

// AuthCodeProxy runs the authorization-code flow with PKCE through the authproxy connector:
// the authorization request, Dex's redirects (every request carrying the proxy's headers), the
// code at the redirect URI, and the code exchanged for tokens.
func (d *Dex) AuthCodeProxy(ctx context.Context, c Client, login ProxyLogin) (Tokens, error) {
	h := http.Header{"X-Remote-User": {login.User}, "X-Remote-User-Email": {login.Email}}
	if len(login.Groups) > 0 {
		h.Set("X-Remote-Group", strings.Join(login.Groups, ","))
	}
	return d.authCode(ctx, c, ProxyConnector, h, nil)
}

// AuthCodePassword runs the authorization-code flow with PKCE through Dex's own login form,
// as a browser would: the form is fetched, filled in and posted.
func (d *Dex) AuthCodePassword(ctx context.Context, c Client, login PasswordLogin) (Tokens, error) {
	return d.authCode(ctx, c, LocalConnector, nil, &login)
}

func (d *Dex) authCode(ctx context.Context, c Client, connector string, headers http.Header, login *PasswordLogin) (Tokens, error) {
	if len(c.RedirectURIs) == 0 {
		return Tokens{}, fmt.Errorf("client %s has no redirect URI", c.ID)
	}
	redirect := c.RedirectURIs[0]
	verifier := randomSecret() + randomSecret()
	sum := sha256.Sum256([]byte(verifier))
	state := randomSecret()
	q := url.Values{
		"client_id": {c.ID}, "redirect_uri": {redirect}, "response_type": {"code"},
		"scope": {strings.Join(Scopes, " ")}, "state": {state}, "connector_id": {connector},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	b := &browser{headers: headers, redirect: redirect}
	resp, err := b.get(ctx, d.Issuer+"/auth?"+q.Encode())
	if err != nil {
		return Tokens{}, err
	}
	if login != nil && resp.final == "" {
		// Dex answered with its login form: post the credentials to the form's own URL.
		form := url.Values{"login": {login.Email}, "password": {login.Password}}
		resp, err = b.post(ctx, resp.url, form)
		if err != nil {
			return Tokens{}, err
		}
	}
	if resp.final == "" {
		return Tokens{}, fmt.Errorf("dex did not redirect to %s (status %d at %s): %s", redirect, resp.status, resp.url, resp.body)
	}
	back, err := url.Parse(resp.final)
	if err != nil {
		return Tokens{}, err
	}
	if back.Query().Get("state") != state {
		return Tokens{}, errors.New("the redirect's state is not the one sent")
	}
	code := back.Query().Get("code")
	if code == "" {
		return Tokens{}, fmt.Errorf("no code in the redirect: %s", back.Query().Get("error_description"))
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {verifier}}
	return d.token(ctx, c, form)
}

// token posts to the token endpoint with the client's credentials.
func (d *Dex) token(ctx context.Context, c Client, form url.Values) (Tokens, error) {
	if c.Public {
		form.Set("client_id", c.ID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Issuer+"/token", strings.NewReader(form.Encode()))
	if err != nil {
		return Tokens{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if !c.Public {
		req.SetBasicAuth(url.QueryEscape(c.ID), url.QueryEscape(c.Secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Tokens{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return Tokens{}, fmt.Errorf("token endpoint: %s: %s", resp.Status, body)
	}
	var t Tokens
	if err := json.Unmarshal(body, &t); err != nil {
		return Tokens{}, fmt.Errorf("token endpoint: %w", err)
	}
	if t.IDToken == "" {
		return Tokens{}, fmt.Errorf("token endpoint returned no id_token: %s", body)
	}
	return t, nil
}

// browser follows Dex's redirects with a cookie-less client that adds headers to every
// request and stops at the client's redirect URI without connecting to it.
type browser struct {
	headers  http.Header
	redirect string
}

type page struct {
	url    string // the last URL fetched
	final  string // the redirect to the client's redirect URI, "" when none was reached
	status int
	body   string
}

func (b *browser) get(ctx context.Context, u string) (page, error) {
	return b.do(ctx, http.MethodGet, u, nil)
}

func (b *browser) post(ctx context.Context, u string, form url.Values) (page, error) {
	return b.do(ctx, http.MethodPost, u, form)
}

func (b *browser) do(ctx context.Context, method, u string, form url.Values) (page, error) {
	var final string
	client := &http.Client{CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), b.redirect) {
			final = req.URL.String()
			return http.ErrUseLastResponse
		}
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		for k, v := range b.headers {
			req.Header[k] = v
		}
		return nil
	}}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return page{}, err
	}
	for k, v := range b.headers {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := client.Do(req)
	if err != nil {
		return page{}, err
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return page{url: resp.Request.URL.String(), final: final, status: resp.StatusCode, body: string(text)}, nil
}
