package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/internal/fileutil"
	"github.com/inferplane/inferplane/internal/kubeconfig"
	"github.com/inferplane/inferplane/lifecycle/gateway"
	"github.com/inferplane/inferplane/usage"
)

// storeFlags choose the key store: a bbolt file (the default) or APIKey objects in a
// Kubernetes namespace.
type storeFlags struct {
	file       string
	namespace  string
	kubeconfig string
	context    string
}

// register adds the store flags to the commands that use a store (create, list, revoke; not
// secret or usage).
func (f *storeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.file, "store-file", "", "key store file (bbolt); default $"+envKeysFile+", else ~/.local/share/inferplane/keys.db")
	fl.StringVar(&f.namespace, "namespace", "", "Kubernetes namespace of the APIKey objects that hold the keys, instead of a file")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file for --namespace (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fl.StringVar(&f.context, "context", "", "kubeconfig context for --namespace (default: the current one)")
}

// open opens the chosen store. With mustExist, a store file that does not exist is an error
// (listing or revoking in a mistyped file would otherwise show an empty store); create makes it.
func (f *storeFlags) open(mustExist bool) (keys.Store, string, error) {
	if err := f.check(); err != nil {
		return nil, "", err
	}
	if f.namespace != "" {
		cfg, err := kubeconfig.Load(f.kubeconfig, f.context)
		if err != nil {
			return nil, "", err
		}
		s, err := keys.NewKubeStore(cfg, f.namespace)
		return s, "namespace " + f.namespace, err
	}
	path := f.file
	if path == "" {
		path = defaultKeysFile()
	}
	if _, err := os.Stat(path); mustExist && errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("key store %s does not exist: no key was ever created there (check --store-file or $%s; "+
			"keys create makes the store)", path, envKeysFile)
	}
	return keys.NewFileStore(path), path, nil
}

// check refuses flags that choose two stores.
func (f *storeFlags) check() error {
	if f.namespace != "" && f.file != "" {
		return usageErr(errors.New("--store-file and --namespace choose different stores: pass one"))
	}
	return nil
}

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys; show their usage",
		Long: `API keys let clients call a tenant's endpoints through Envoy. A key looks like
ipk_<54 characters> and is printed once, when it is created: the store keeps only its
HMAC-SHA256 under the server secret, never the key.

Keys live in a bbolt file (--store-file, the default) or, for clusters with several xDS
server replicas, as APIKey objects in a Kubernetes namespace (--namespace). The server
secret is read from --secret-file, $` + envKeysSecretFile + `, $` + keys.SecretEnv + ` or ~/.config/inferplane/keys-secret;
on first use, make it with "keys secret --file" and give the gateway (xds serve) the same.

A key can carry rate limits and token budgets of its own (keys create --requests-per-minute,
--tokens-per-day, ...; keys limit changes them), on top of its tenant's (tenant.yaml
spec.limits); keys usage shows the spend against each.`,
		Example: `  inferplane keys secret --file ~/.config/inferplane/keys-secret   # once
  inferplane keys create --tenant acme --endpoint chat --file acme-chat.key
  inferplane keys list --tenant acme`,
	}
	cmd.AddCommand(newKeysSecretCmd(), newKeysCreateCmd(), newKeysListCmd(), newKeysRevokeCmd(), newKeysUsageCmd(), newKeysLimitCmd(),
		newKeysServeCmd())
	return cmd
}

func newKeysSecretCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "secret [--file FILE]",
		Short: "Make a new random server secret, the key every API key is hashed with",
		Long: `secret makes 48 random bytes, as URL-safe base64, and writes them to --file (mode 0600, in a
folder it creates with mode 0700; never over an existing file) or prints them. In
~/.config/inferplane/keys-secret, the keys commands and xds serve find it without a flag;
elsewhere, give them --secret-file or $` + envKeysSecretFile + `. In a cluster, keep it in a Secret:

  kubectl -n inferplane-system create secret generic inferplane-keys --from-file=secret=FILE

Every key is hashed with this secret: replacing it invalidates every key.`,
		Example: `  # First use on this machine: where keys create and xds serve look for it
  inferplane keys secret --file ~/.config/inferplane/keys-secret

  inferplane keys secret --file /etc/inferplane/keys-secret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := keys.NewSecret()
			if err != nil {
				return err
			}
			if file == "" {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), s)
				return err
			}
			if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
				return err
			}
			if err := fileutil.WriteNew(file, []byte(s+"\n"), 0o600); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("%s exists: a new secret would invalidate every key hashed with that one; remove it first if that is what you want", file)
				}
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote a new key secret to %s (mode 0600)\n", file)
			return nil
		},
	}
	addFileFlag(cmd, &file)
	return cmd
}

// newKeyFile creates the file a new key goes to, readable by its owner only; it is opened
// before the key is issued, so that a key that cannot be written is never issued.
func newKeyFile(path string) (*os.File, error) {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("--file %s exists: a key is written to a new file only (no key was created)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("--file: %w (no key was created)", err)
	}
	return out, nil
}

// keysCreateFlags are keys create's flags.
type keysCreateFlags struct {
	sf                                                  storeFlags
	kc                                                  keyCheck
	lf                                                  limitFlags
	tenant, endpoint, name, expires, secretFile, output string
	file                                                string
}

func newKeysCreateCmd() *cobra.Command {
	var f keysCreateFlags
	cmd := &cobra.Command{
		Use:   "create --tenant T [--endpoint E] [--name N] [--expires 720h|30d|2027-01-31|RFC3339] [--file FILE]",
		Short: "Create a key and show it once",
		Long: `Creates a key for a tenant (all its endpoints, or one with --endpoint) and writes it to
--file (mode 0600, a new file only) or prints it on standard output, alone, so that it can be
captured:

  KEY=$(inferplane keys create --tenant acme --endpoint qwen3-32b --name ci --expires 90d)

The key is shown this once; the store keeps only its hash. Printed into a file others can read
(a shell's "> file" makes it mode 0644), it draws a warning: prefer --file.

The tenant and the endpoint must exist: they are looked up in the tenants folder (--tenants,
the generator's inputs: <tenant>/jobs/<job>.yaml) or, when there is none, among the endpoints
the gateway knows (--server or $` + envServerURL + `). A name that matches nothing is refused with
the closest known names; with nothing to check against (no folder, no gateway given, or a
gateway that does not answer) the key is refused too. --force skips the check (a key for a
tenant not deployed yet).

` + limitsHelp,
		Example: `  # A key for one endpoint, into a file only you can read
  inferplane keys create --tenant acme --endpoint chat --file acme-chat.key

  # A key for every endpoint of tenant acme, valid 30 days
  inferplane keys create --tenant acme --expires 30d

  # A trial key: 20 requests a minute, 100,000 tokens a day, 1M a month (warning only)
  inferplane keys create --tenant acme --requests-per-minute 20 --tokens-per-day 100000 \
    --tokens-per-month 1000000 --soft tpmo

  # The key and its record, as JSON
  inferplane keys create --tenant acme --endpoint qwen3-32b --name ci -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runKeysCreate(cmd, &f) },
	}
	f.sf.register(cmd)
	f.kc.register(cmd)
	f.lf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.tenant, "tenant", "", "tenant the key belongs to (required)")
	fl.StringVar(&f.endpoint, "endpoint", "", "job endpoint the key is limited to (default: every endpoint of the tenant)")
	fl.StringVar(&f.name, "name", "", "name of the key, for people, e.g. \"ci pipeline\"")
	fl.StringVar(&f.expires, "expires", "", "expiry: a duration from now (720h, 30d) or a date/time (2027-01-31, RFC 3339); default never")
	fl.StringVar(&f.secretFile, "secret-file", "", secretFileUsage)
	fl.StringVar(&f.file, "file", "", "write to this file instead of standard output: the key, to a new file of mode 0600")
	registerOutput(cmd, &f.output, "", "the key alone", "json", "yaml")
	_ = cmd.MarkFlagRequired("tenant")
	_ = cmd.RegisterFlagCompletionFunc("tenant", completeTenants)
	_ = cmd.RegisterFlagCompletionFunc("endpoint", completeEndpoints)
	return cmd
}

func runKeysCreate(cmd *cobra.Command, f *keysCreateFlags) error {
	if err := f.sf.check(); err != nil {
		return err
	}
	lim, err := f.lf.spec()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	exp, err := keys.ParseExpiry(f.expires, now)
	if err != nil {
		return usageErr(fmt.Errorf("--expires: %w", err))
	}
	req := keys.Request{Tenant: f.tenant, Endpoint: f.endpoint, Name: f.name, ExpiresAt: exp, Limits: lim}
	if errs := req.Check(now); len(errs) > 0 {
		return usageErr(flagErrors(errs, nil, ""))
	}
	secret, err := loadSecret(f.secretFile)
	if err != nil {
		return err
	}
	h, err := keys.NewHasher(secret)
	if err != nil {
		return usageErr(err)
	}
	if !f.kc.force {
		if err := f.kc.check(cmd, req); err != nil {
			return err
		}
	}
	// The file before the key: a key that cannot be written is never issued.
	var out *os.File
	if f.file != "" {
		if out, err = newKeyFile(f.file); err != nil {
			return err
		}
		defer out.Close()
	}
	store, where, err := f.sf.open(false)
	if err == nil {
		var key string
		var rec keys.Record
		if key, rec, err = keys.Issue(cmd.Context(), store, h, req, now); err == nil {
			return printCreated(cmd, f, out, key, rec, where, now)
		}
	}
	if out != nil {
		out.Close()
		os.Remove(f.file)
	}
	return err
}

// loadSecret reads the API key secret (secretFile), or says how to make one.
func loadSecret(flag string) ([]byte, error) {
	file := secretFile(flag)
	if file == "" && os.Getenv(keys.SecretEnv) == "" {
		return nil, usageErr(errNoSecret)
	}
	s, err := keys.LoadSecret(file)
	if err != nil {
		return nil, usageErr(err)
	}
	return s, nil
}

// printCreated shows the new key once: alone (or with its record, -o json|yaml) on stdout or in
// --file, and a notice on stderr; a key printed into a file others can read draws a warning.
func printCreated(cmd *cobra.Command, f *keysCreateFlags, file *os.File, key string, rec keys.Record, where string, now time.Time) error {
	var w io.Writer = cmd.OutOrStdout()
	if file != nil {
		w = file
	}
	var err error
	if f.output == "json" || f.output == "yaml" {
		err = printData(w, f.output, struct {
			Key string `json:"key"`
			keyView
		}{key, keyViewOf(rec, now)})
	} else {
		_, err = fmt.Fprintln(w, key)
	}
	if err != nil {
		return err
	}
	scope := "every endpoint of " + rec.Tenant
	if rec.Endpoint != "" {
		scope = "endpoint " + rec.Endpoint + " of " + rec.Tenant
	}
	expiry := "never expires"
	if !rec.ExpiresAt.IsZero() {
		expiry = "expires " + rec.ExpiresAt.Format(time.RFC3339)
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "Created key %s for %s (%s; %s) in %s.\n", rec.ID, scope, expiry, describeLimits(rec.Limits), where)
	if file != nil {
		fmt.Fprintf(stderr, "wrote the key to %s (mode 0600); this is the only time it is shown.\n", f.file)
		return file.Close()
	}
	fmt.Fprintln(stderr, "This is the only time the key is shown: store it now.")
	if name, mode, ok := readableByOthers(cmd.OutOrStdout()); ok {
		fmt.Fprintf(stderr, "warning: the key went to %s, which others can read (mode %04o): chmod 600 it, or use --file FILE next time\n", name, mode)
	}
	return nil
}

// readableByOthers says whether w is a regular file that its group or others may read.
func readableByOthers(w io.Writer) (name string, mode os.FileMode, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return "", 0, false
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o044 == 0 {
		return "", 0, false
	}
	return f.Name(), st.Mode().Perm(), true
}

// keyView is a record as the CLI shows it: with its status, without its hash.
type keyView struct {
	ID        string      `json:"id"`
	Tenant    string      `json:"tenant"`
	Endpoint  string      `json:"endpoint,omitempty"`
	Name      string      `json:"name,omitempty"`
	Status    keys.Status `json:"status"`
	CreatedAt time.Time   `json:"createdAt"`
	ExpiresAt time.Time   `json:"expiresAt,omitzero"`
	RevokedAt time.Time   `json:"revokedAt,omitzero"`
	// Limits are the key's own limits.
	Limits *v1alpha1.RateLimits `json:"limits,omitempty"`
}

func keyViewOf(r keys.Record, now time.Time) keyView {
	return keyView{ID: r.ID, Tenant: r.Tenant, Endpoint: r.Endpoint, Name: r.Name, Status: r.Status(now),
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt, Limits: r.Limits}
}

func newKeysListCmd() *cobra.Command {
	var (
		sf                               storeFlags
		tenant, endpoint, status, output string
	)
	cmd := &cobra.Command{
		Use:   "list [--tenant T] [--status active|revoked|expired] [-o table|json|yaml|name]",
		Short: "List keys (ids and status; never the keys themselves)",
		Long: `list shows the keys of the store: id, tenant, endpoint, name, status, when each was created
and when it expires. -o name prints the ids alone, one a line (for keys revoke).`,
		Example: `  # Every key in the default store
  inferplane keys list

  # Tenant acme's active keys, as JSON, from the APIKey objects of a cluster
  inferplane keys list --tenant acme --status active -o json --namespace inferplane-system

  # Revoke every active key of endpoint chat
  inferplane keys revoke --yes $(inferplane keys list --tenant acme --endpoint chat --status active -o name)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch keys.Status(status) {
			case "", keys.StatusActive, keys.StatusRevoked, keys.StatusExpired:
			default:
				return usageErr(fmt.Errorf("--status %q: expected active, revoked or expired", status))
			}
			views, err := listKeys(cmd, &sf, func(v keyView) bool {
				return (tenant == "" || v.Tenant == tenant) && (endpoint == "" || v.Endpoint == endpoint) &&
					(status == "" || string(v.Status) == status)
			})
			if err != nil {
				return err
			}
			return printKeys(cmd.OutOrStdout(), output, views)
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant whose keys to list (default: every tenant's)")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "job endpoint: only the keys limited to it")
	cmd.Flags().StringVar(&status, "status", "", "only keys in this status: active, revoked or expired")
	registerOutput(cmd, &output, "table", "", "table", "json", "yaml", "name")
	_ = cmd.RegisterFlagCompletionFunc("tenant", completeTenants)
	return cmd
}

// listKeys reads the store's keys that keep says to keep.
func listKeys(cmd *cobra.Command, sf *storeFlags, keep func(keyView) bool) ([]keyView, error) {
	store, _, err := sf.open(true)
	if err != nil {
		return nil, err
	}
	recs, err := store.List(cmd.Context())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	views := []keyView{}
	for _, r := range recs {
		if v := keyViewOf(r, now); keep(v) {
			views = append(views, v)
		}
	}
	return views, nil
}

func printKeys(w io.Writer, output string, views []keyView) error {
	switch output {
	case "json", "yaml":
		return printData(w, output, views)
	case "name":
		for _, v := range views {
			fmt.Fprintln(w, v.ID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tENDPOINT\tNAME\tSTATUS\tCREATED\tEXPIRES")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Tenant, cmp.Or(v.Endpoint, "*"), cmp.Or(v.Name, "-"),
			v.Status, v.CreatedAt.Format(time.RFC3339), keysTimeOr(v.ExpiresAt, "never"))
	}
	return tw.Flush()
}

func newKeysRevokeCmd() *cobra.Command {
	var (
		sf  storeFlags
		yes bool
	)
	cmd := &cobra.Command{
		Use:   "revoke ID... [--yes]",
		Short: "Revoke keys (a soft delete: the record and its usage stay)",
		Long: `Revokes keys by id. Every xDS server watching the store refuses them within a second.
The record stays, listed as revoked, so usage recorded against the id keeps its owner. A
revocation cannot be undone: on a terminal revoke asks first; elsewhere --yes is required.`,
		Example: `  # Revoke two keys by the ids keys list shows
  inferplane keys revoke 3f9a0c1d2e4b5a69 7c21d0e9f8a6b543

  # In a script, in a store file other than the default
  inferplane keys revoke --yes --store-file /srv/inferplane/keys.db 3f9a0c1d2e4b5a69`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			for _, id := range ids {
				if kid, err := keys.ParseID(id); err == nil {
					// Not echoed: it is a secret.
					return usageErr(fmt.Errorf("that is a key, not a key id: its id is %s (keys revoke %s)", kid, kid))
				}
				if !keys.ValidID(id) {
					return usageErr(fmt.Errorf("%q is not a key id (16 hex digits, as `keys list` shows)", id))
				}
			}
			store, where, err := sf.open(true)
			if err != nil {
				return err
			}
			if !yes {
				if err := confirm(cmd, fmt.Sprintf("Revoke %d key(s) in %s (%s)? This cannot be undone. [y/N] ", len(ids), where, strings.Join(ids, ", "))); err != nil {
					return err
				}
			}
			return revokeKeys(cmd, store, ids)
		},
	}
	sf.register(cmd)
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (required when stdin is not a terminal)")
	return cmd
}

// revokeKeys revokes the keys of ids in store, saying what it did with each.
func revokeKeys(cmd *cobra.Command, store keys.Store, ids []string) error {
	now := time.Now().UTC().Truncate(time.Second)
	for _, id := range ids {
		before, err := store.Get(cmd.Context(), id)
		if err != nil {
			return err
		}
		if !before.RevokedAt.IsZero() {
			fmt.Fprintf(cmd.OutOrStdout(), "%s was already revoked at %s\n", id, before.RevokedAt.Format(time.RFC3339))
			continue
		}
		r, err := store.Revoke(cmd.Context(), id, now)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (tenant %s)\n", id, r.Tenant)
	}
	return nil
}

func newKeysUsageCmd() *cobra.Command {
	var tenant, key, since, output string
	var servers []string
	var hourly bool
	cmd := &cobra.Command{
		Use:   "usage [--tenant T] [--key ID] [--since 24h] [--hourly] [--server URL]... [-o table|json|yaml]",
		Short: "Show requests and tokens per key, from running xDS servers",
		Long: `Reads per-key usage (requests, tokens in and out, per hour) from the admin address of a
running xDS server (` + usage.UsagePath + `), which counts it from Envoy's access logs.

Each server counts the access logs of the Envoys connected to it. With several server
replicas, repeat --server once per replica (each replica's own address, not a load-balanced
Service): the figures are summed per key and hour. A server that cannot be reached fails the
command rather than print a partial sum.

Then the spend against each limit of the tenant and its keys in the current windows (used, of,
remaining, when it resets), from the first server's /v1/limits: the counts are shared by every
replica.`,
		Example: `  inferplane keys usage --tenant acme --since 24h
  inferplane keys usage --server http://10.0.0.5:9090 --server http://10.0.0.6:9090 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := usage.ParseSince(since, time.Now()); err != nil {
				return usageErr(fmt.Errorf("--since: %w", err))
			}
			q := url.Values{}
			for k, v := range map[string]string{"tenant": tenant, "key": key, "since": since} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if len(servers) == 0 {
				return usageErr(errors.New("--server: give at least one xDS server URL"))
			}
			var rep usage.UsageReport
			lists := make([][]usage.KeyUsage, 0, len(servers))
			for _, server := range servers {
				one, err := gateway.Client{BaseURL: server}.Usage(cmd.Context(), q)
				if err != nil {
					return gatewayErr(err)
				}
				if rep.From.IsZero() {
					rep.From, rep.To = one.From, one.To
				}
				lists = append(lists, one.Keys)
			}
			rep.Keys = usage.MergeUsage(lists...)
			// Limits are counted in the store every replica shares: one server answers for all.
			lim, err := fetchLimits(cmd, servers[0], tenant, key)
			if err != nil {
				return err
			}
			if output != "table" {
				return printData(cmd.OutOrStdout(), output, struct {
					usage.UsageReport
					Limits []limits.LimitStatus `json:"limits"`
				}{rep, lim.Limits})
			}
			if err := usageTable(cmd.OutOrStdout(), rep, hourly); err != nil {
				return err
			}
			return printLimits(cmd.OutOrStdout(), lim)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", "", "tenant whose keys' usage to show (default: every tenant's)")
	fl.StringVar(&key, "key", "", "only this key id")
	fl.StringVar(&since, "since", "", "from this long ago (24h) or this RFC 3339 time; default everything kept")
	fl.BoolVar(&hourly, "hourly", false, "one row per key and hour")
	fl.StringArrayVar(&servers, "server", []string{serverURLDefault()}, serverUsage+"; repeat it for each server replica")
	registerOutput(cmd, &output, "table", "", "table", "json", "yaml")
	_ = cmd.RegisterFlagCompletionFunc("tenant", completeTenants)
	return cmd
}

func usageTable(w io.Writer, rep usage.UsageReport, hourly bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	if hourly {
		fmt.Fprintln(tw, "KEY\tTENANT\tHOUR\tREQUESTS\tTOKENS IN\tTOKENS OUT\t")
		for _, k := range rep.Keys {
			for _, h := range k.Hours {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t\n", k.KeyID, k.Tenant, h.Hour.Format("2006-01-02 15:00"), h.Requests, h.TokensIn, h.TokensOut)
			}
		}
	} else {
		fmt.Fprintln(tw, "KEY\tTENANT\tENDPOINTS\tREQUESTS\tTOKENS IN\tTOKENS OUT\t")
		for _, k := range rep.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t\n", k.KeyID, k.Tenant, strings.Join(k.Endpoints, ","), k.Total.Requests, k.Total.TokensIn, k.Total.TokensOut)
		}
	}
	return tw.Flush()
}

// gatewayErr words an error of the gateway's admin API (lifecycle/gateway) for the command
// line: a bad --server is a usage error, and an unreachable one says how to point at another.
func gatewayErr(err error) error {
	var ue *gateway.UnreachableError
	switch {
	case errors.Is(err, gateway.ErrBadURL):
		return usageErr(fmt.Errorf("--server: %w", err))
	case errors.As(err, &ue):
		return fmt.Errorf("reach the xDS server: %w (is `inferplane xds serve` running there? set --server or $%s)", err, envServerURL)
	}
	return err
}

func keysTimeOr(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.Format(time.RFC3339)
}
