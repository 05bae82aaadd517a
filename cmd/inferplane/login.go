package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
	"github.com/inferplane/inferplane/productapi/clientconfig"
	"github.com/inferplane/inferplane/productapi/signin"
)

// openBrowser shows the sign-in page: $BROWSER, else xdg-open. Tests replace it with a person
// filling in the identity provider's form.
var openBrowser = func(ctx context.Context, u string) error {
	name := os.Getenv("BROWSER")
	if name == "" {
		name = "xdg-open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, u)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

type loginFlags struct {
	server, name, tenant string
	device, noBrowser    bool
	port                 int
	timeout              time.Duration
}

func newLoginCmd() *cobra.Command {
	var f loginFlags
	cmd := &cobra.Command{
		Use:   "login URL",
		Short: "Sign in to a product API server (OIDC in the browser, or --device) and make it the current context",
		Long: `login signs in to the product API at URL as its customers do: it asks the server which
identity provider and client id to use (GET /api/v1/signin), then runs the authorization-code
flow with PKCE in the browser, with the redirect to a listener on 127.0.0.1 (or, with --device,
the device flow: a code to enter on any device). The tokens are kept in
$XDG_CONFIG_HOME/inferplane/tokens (mode 0600) and refreshed when they expire; the server
becomes a context (like kubectl's) and the current one, so jobs, keys, usage, health and models
then call the API. When you belong to one tenant it becomes the context's default (--tenant
picks another).

The identity provider's client must be public (no secret) and allow loopback redirects
(Dex: public: true without redirectURIs; Keycloak: a public client with redirect URI
http://127.0.0.1/*; Okta: a native app with http://127.0.0.1 redirects), or list
http://127.0.0.1:PORT/callback for a fixed --redirect-port.`,
		Example: `  inferplane login https://api.models.example.com
  inferplane login https://api.models.example.com --device      # no browser on this machine
  inferplane login http://127.0.0.1:8080 --tenant acme --name dev`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && f.server != "" && f.server != args[0]:
				return usageErr(fmt.Errorf("two servers: %s and --server %s", args[0], f.server))
			case len(args) == 1:
				f.server = args[0]
			case f.server == "":
				return usageErr(errors.New("which product API? inferplane login URL (e.g. https://api.models.example.com)"))
			}
			return runLogin(cmd, f)
		},
	}
	fl := cmd.Flags()
	// --server URL, as issue 19 words it, is accepted; hidden, since --server is the
	// gateway's admin URL in every other command.
	fl.StringVar(&f.server, "server", "", "the product API's URL (the argument)")
	_ = fl.MarkHidden("server")
	fl.StringVar(&f.name, "name", "", "name of the context (default: the server's host and port)")
	fl.StringVar(&f.tenant, "tenant", "", "tenant the context's commands act on when given none (default: your only tenant, if you have one)")
	fl.BoolVar(&f.device, "device", false, "sign in with the device flow: a code to enter in a browser on any device")
	fl.BoolVar(&f.noBrowser, "no-browser", false, "print the sign-in URL instead of opening a browser")
	fl.IntVar(&f.port, "redirect-port", 0, "the loopback port of the redirect (default: any free one; a provider with fixed redirect URIs needs one)")
	fl.DurationVar(&f.timeout, "browser-timeout", 5*time.Minute, "how long to wait for the sign-in in the browser")
	return cmd
}

func runLogin(cmd *cobra.Command, f loginFlags) error {
	ctx := cmd.Context()
	u, err := url.Parse(f.server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return usageErr(fmt.Errorf("%q: expected the product API's URL, http(s)://host[:port]", f.server))
	}
	server := strings.TrimRight(f.server, "/")
	si, err := apiclient.New(server, nil).SignIn(ctx)
	if err != nil {
		return fmt.Errorf("asking %s how to sign in (GET /api/v1/signin): %w", server, err)
	}
	p, err := signin.Discover(ctx, si.Issuer, si.ClientID, nil)
	if err != nil {
		return err
	}
	errOut := cmd.ErrOrStderr()
	var tokens clientconfig.Tokens
	if f.device {
		tokens, err = p.Device(ctx, func(uri, complete, code string) error {
			fmt.Fprintf(errOut, "To sign in, open %s and enter the code %s\n", uri, code)
			if complete != "" {
				fmt.Fprintf(errOut, "(or open %s)\n", complete)
			}
			fmt.Fprintln(errOut, "Waiting for the sign-in ...")
			return nil
		})
	} else {
		tokens, err = p.AuthCode(ctx, signin.LoopbackOptions{Port: f.port, Timeout: f.timeout, Open: func(ctx context.Context, authURL string) error {
			if !f.noBrowser {
				if err := openBrowser(ctx, authURL); err == nil {
					fmt.Fprintf(errOut, "Opened the browser to sign in. If it did not open, visit:\n  %s\n", authURL)
					return nil
				}
			}
			fmt.Fprintf(errOut, "To sign in, open this URL in a browser on this machine:\n  %s\n", authURL)
			return nil
		}})
	}
	if err != nil {
		return fmt.Errorf("signing in at %s: %w", si.Issuer, err)
	}
	me, err := apiclient.New(server, apiclient.StaticToken(tokens.IDToken)).Me(ctx)
	if err != nil {
		return fmt.Errorf("signed in at %s, but %s refused the token: %w", si.Issuer, server, err)
	}
	c := clientconfig.Context{Name: f.name, Server: server, Issuer: si.Issuer, ClientID: si.ClientID, User: signin.Who(tokens)}
	if c.Name == "" {
		c.Name = clientconfig.NameFor(server)
	}
	if c.Tenant, err = defaultTenant(me, f.tenant); err != nil {
		return err
	}
	store, err := clientconfig.Open()
	if err != nil {
		return err
	}
	cfg, err := store.Load()
	if err != nil {
		return err
	}
	if err := store.SaveTokens(c.Name, tokens); err != nil {
		return err
	}
	cfg.Set(c)
	cfg.CurrentContext = c.Name
	if err := store.Save(cfg); err != nil {
		return err
	}
	fmt.Fprintf(errOut, "Signed in to %s as %s; context %q is now current.\n", server, c.User, c.Name)
	fmt.Fprintf(errOut, "Tenants: %s\n", memberships(me))
	if c.Tenant != "" {
		fmt.Fprintf(errOut, "Commands act on tenant %s unless given another (--tenant, or <tenant>/<job>).\n", c.Tenant)
	}
	return nil
}

// defaultTenant is the tenant a context acts on: the one asked for (which the caller must
// belong to), else the caller's only one.
func defaultTenant(me apiv1.Me, asked string) (string, error) {
	if asked != "" {
		for _, m := range me.Tenants {
			if m.Tenant == asked {
				return asked, nil
			}
		}
		if me.Operator {
			return asked, nil
		}
		return "", fmt.Errorf("--tenant %s: you have no role in it; yours: %s", asked, memberships(me))
	}
	if len(me.Tenants) == 1 {
		return me.Tenants[0].Tenant, nil
	}
	return "", nil
}

func memberships(me apiv1.Me) string {
	if len(me.Tenants) == 0 {
		if me.Operator {
			return "every tenant (operator)"
		}
		return "none yet (ask the platform team to add you or your group to a tenant's spec.access)"
	}
	parts := make([]string, len(me.Tenants))
	for i, m := range me.Tenants {
		parts[i] = m.Tenant + " (" + m.Role + ")"
	}
	s := strings.Join(parts, ", ")
	if me.Operator {
		s += "; operator: every tenant"
	}
	return s
}

func newLogoutCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logout [CONTEXT]",
		Short: "Forget a context's tokens (the current context's by default)",
		Long: `logout deletes the tokens kept for a context; the context stays (login signs in again).
The identity provider's session, if any, is not ended.`,
		Example: `  inferplane logout
  inferplane logout dev`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, cfg, err := loadContexts()
			if err != nil {
				return err
			}
			name := cfg.CurrentContext
			if len(args) == 1 {
				name = args[0]
			}
			if _, ok := cfg.Get(name); !ok {
				return usageErr(noContext(name, cfg))
			}
			if err := store.DeleteTokens(name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Signed out of context %q.\n", name)
			return nil
		},
	}
	return cmd
}

func loadContexts() (*clientconfig.Store, *clientconfig.Config, error) {
	store, err := clientconfig.Open()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := store.Load()
	return store, cfg, err
}

func noContext(name string, cfg *clientconfig.Config) error {
	if name == "" {
		return errors.New("no current context: sign in with `inferplane login URL`")
	}
	have := "none"
	if n := cfg.Names(); len(n) > 0 {
		have = strings.Join(n, ", ")
	}
	return fmt.Errorf("no context %q (contexts: %s)", name, have)
}
