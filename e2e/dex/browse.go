package dex

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

// noStop is a redirect prefix no URL has: the browser follows every redirect, the client's
// loopback redirect included.
const noStop = "\x00"

// Browse is a person signing in at an authorization URL a client (the CLI) printed or opened:
// the person picks Dex's email login, fills in the form, and the browser follows Dex's
// redirects back to the client's redirect URI, which it loads (a client listening on
// 127.0.0.1 gets its code there). It returns the status the client's page answered with.
func (d *Dex) Browse(ctx context.Context, authURL string, login PasswordLogin) (int, error) {
	if !strings.HasPrefix(authURL, d.Issuer+"/") {
		return 0, fmt.Errorf("the authorization URL %s is not this Dex's (%s)", authURL, d.Issuer)
	}
	u, err := url.Parse(authURL)
	if err != nil {
		return 0, err
	}
	q := u.Query()
	if q.Get("connector_id") == "" {
		q.Set("connector_id", LocalConnector) // the person clicks "Log in with Email"
		u.RawQuery = q.Encode()
	}
	return d.fillIn(ctx, u.String(), login)
}

// ApproveDevice is a person entering a device flow's user code at Dex's verification page,
// then signing in with the email login; Dex shows its "you may close this page" page.
func (d *Dex) ApproveDevice(ctx context.Context, userCode string, login PasswordLogin) error {
	b := &browser{redirect: noStop}
	resp, err := b.post(ctx, d.Issuer+"/device/auth/verify_code", url.Values{"user_code": {userCode}})
	if err != nil {
		return err
	}
	// Dex redirected to its authorization endpoint without a connector: pick the email login.
	u, err := url.Parse(resp.url)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(u.Path, "/auth") {
		return fmt.Errorf("dex did not take the user code %s (status %d at %s): %s", userCode, resp.status, resp.url, resp.body)
	}
	q := u.Query()
	q.Set("connector_id", LocalConnector)
	u.RawQuery = q.Encode()
	status, err := d.fillIn(ctx, u.String(), login)
	if err != nil {
		return err
	}
	if status != 200 {
		return fmt.Errorf("dex's device callback answered %d", status)
	}
	return nil
}

// fillIn loads an authorization URL naming the email login, posts the credentials to the form
// it shows, and follows every redirect after.
func (d *Dex) fillIn(ctx context.Context, authURL string, login PasswordLogin) (int, error) {
	b := &browser{redirect: noStop}
	resp, err := b.get(ctx, authURL)
	if err != nil {
		return 0, err
	}
	if !strings.Contains(resp.body, `name="password"`) {
		return resp.status, fmt.Errorf("dex showed no login form at %s (status %d): %.300s", resp.url, resp.status, resp.body)
	}
	resp, err = b.post(ctx, resp.url, url.Values{"login": {login.Email}, "password": {login.Password}})
	if err != nil {
		return 0, err
	}
	return resp.status, nil
}
