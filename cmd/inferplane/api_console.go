package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/console"
	"github.com/inferplane/inferplane/console/apibackend"
	"github.com/inferplane/inferplane/productapi"
)

// consoleFlags are api serve's flags of the web console (docs/console.md).
type consoleFlags struct {
	off              bool
	url              string
	clientID         string
	clientSecretFile string
	sessionKeysFile  string
	dev              bool
	gateway          string
}

func (f *consoleFlags) register(fl *pflag.FlagSet) {
	fl.BoolVar(&f.off, "no-console", false, "serve the API only, without the web console at /")
	fl.StringVar(&f.url, "console-url", "", "where browsers reach the console, e.g. https://console.example.com (default http://<--listen> on 127.0.0.1); the provider sends them back to <url>/auth/callback")
	fl.StringVar(&f.clientID, "console-client-id", "", "the console's OIDC client id (default --oidc-client-id); <console-url>/auth/callback must be among its redirect URIs")
	fl.StringVar(&f.clientSecretFile, "console-client-secret-file", "", "file with the console's OIDC client secret (none: a public client, PKCE alone)")
	fl.StringVar(&f.sessionKeysFile, "console-session-keys", "", "file of the keys that seal the console's session cookies, one 32-byte key per line in hex (openssl rand -hex 32); every replica must have the same (default: a random key, sessions end with the process)")
	fl.BoolVar(&f.dev, "console-dev", false, "sign in to the console as whoever you type, without an identity provider; refused unless --listen is on 127.0.0.1; the API then refuses every bearer token")
	fl.StringVar(&f.gateway, "console-gateway", "", "where the playground sends the endpoints' requests, with the endpoint's host name: host:port (the gateway's TLS listener) or a URL whose scheme says TLS or not, e.g. http://127.0.0.1:8080 (default: each endpoint's own host)")
}

// check adds the flags' usage errors; with --console-dev, --oidc-issuer is not required.
func (f *consoleFlags) check(c *productapi.Config) []error {
	var errs []error
	if f.off {
		if f.dev {
			errs = append(errs, errors.New("--console-dev signs in to the console, which --no-console turns off"))
		}
		return errs
	}
	if _, err := gatewayTransport(f.gateway); err != nil {
		errs = append(errs, err)
	}
	if f.dev {
		if err := console.CheckDevListen(c.Listen); err != nil {
			errs = append(errs, err)
		}
		if c.OIDC.Issuer != "" {
			errs = append(errs, errors.New("--console-dev signs in without an identity provider: leave out --oidc-issuer, or --console-dev"))
		}
	}
	return errs
}

// apply sets the API's verifier (the console's in-process calls let in) and its console.
func (f *consoleFlags) apply(c *productapi.Config, log *slog.Logger) error {
	if f.off {
		return nil
	}
	if host, _, _ := net.SplitHostPort(c.Listen); f.url == "" && !f.dev && host != "127.0.0.1" {
		log.Warn("console: not served: browsers reach a server listening beyond 127.0.0.1 at an address only --console-url can say (and the provider must send them back there); serving the API only")
		return nil
	}
	var (
		oidc  *console.OIDC
		inner productapi.Verifier
	)
	if !f.dev {
		v, err := access.NewVerifier(c.OIDC)
		if err != nil {
			return err
		}
		inner = v
		cv := v
		id := c.OIDC.ClientID
		if f.clientID != "" && f.clientID != c.OIDC.ClientID {
			cfg := c.OIDC
			cfg.ClientID = f.clientID
			if cv, err = access.NewVerifier(cfg); err != nil {
				return err
			}
			id = f.clientID
		}
		oidc = &console.OIDC{Issuer: c.OIDC.Issuer, ClientID: id, Verifier: cv}
		if f.clientSecretFile != "" {
			b, err := os.ReadFile(f.clientSecretFile)
			if err != nil {
				return fmt.Errorf("--console-client-secret-file: %w", err)
			}
			oidc.ClientSecret = strings.TrimSpace(string(b))
		}
	}
	c.Verifier = apibackend.Verifier(inner)
	keys, err := f.sessionKeys(log)
	if err != nil {
		return err
	}
	gw, err := gatewayTransport(f.gateway)
	if err != nil {
		return err
	}
	c.Console = func(api http.Handler, addr string) (productapi.Console, error) {
		ext := f.url
		if ext == "" && !f.dev {
			if host, _, _ := net.SplitHostPort(addr); host == "127.0.0.1" {
				ext = "http://" + addr
			}
		}
		return console.New(console.Options{Backend: apibackend.New(api), OIDC: oidc, ExternalURL: ext, SessionKeys: keys,
			Dev: f.dev, ListenAddr: addr, Gateway: gw, Logger: log})
	}
	return nil
}

func (f *consoleFlags) sessionKeys(log *slog.Logger) ([][]byte, error) {
	if f.sessionKeysFile != "" {
		k, err := console.LoadSessionKeys(f.sessionKeysFile)
		if err != nil {
			return nil, fmt.Errorf("--console-session-keys: %w", err)
		}
		return k, nil
	}
	k := make([]byte, console.KeySize)
	_, _ = rand.Read(k)
	log.Warn("console: no --console-session-keys, so a random key seals the sessions: they end when this process stops, and another replica cannot open them")
	return [][]byte{k}, nil
}

// gatewayTransport carries the playground's requests to --console-gateway, the endpoint's host
// name still sent (in TLS too), or to each endpoint's own host when it is empty. host:port
// speaks the endpoint's scheme (https); a URL's scheme says which to speak, so http:// reaches
// a plain listener (make demo's stand-in for Envoy, a port-forward).
func gatewayTransport(gateway string) (http.RoundTripper, error) {
	if gateway == "" {
		return http.DefaultTransport, nil
	}
	addr, plain, ok := gateway, false, false
	if strings.Contains(gateway, "://") {
		u, err := url.Parse(gateway)
		ok = err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Port() != "" && strings.Trim(u.Path, "/") == ""
		if ok {
			addr, plain = u.Host, u.Scheme == "http"
		}
	} else {
		_, port, err := net.SplitHostPort(gateway)
		ok = err == nil && port != ""
	}
	if !ok {
		return nil, fmt.Errorf("--console-gateway %q: expected host:port or a URL with a port and no path, e.g. http://127.0.0.1:8080", gateway)
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
	}, ResponseHeaderTimeout: 2 * time.Minute}
	if plain {
		return plainHTTP{tr}, nil
	}
	return tr, nil
}

// plainHTTP sends an https:// request as plain HTTP, its host name in the Host header.
type plainHTTP struct{ next http.RoundTripper }

func (p plainHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Host == "" {
		r.Host = r.URL.Host
	}
	r.URL.Scheme = "http"
	return p.next.RoundTrip(r)
}
