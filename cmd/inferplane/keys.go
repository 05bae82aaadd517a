package main

import (
	"cmp"
	"encoding/json"
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
	"github.com/inferplane/inferplane/internal/kubeconfig"
	"github.com/inferplane/inferplane/lifecycle/gateway"
	"github.com/inferplane/inferplane/usage"
)

// Environment variables the keys and health commands read.
const (
	envKeysFile  = "INFERPLANE_KEYS_FILE"
	envServerURL = "INFERPLANE_SERVER"
	// defaultServerURL is the admin address of `inferplane xds serve` (--admin-address :9090),
	// where it serves /metrics and, mounted by the lead, /v1/health and /v1/usage.
	defaultServerURL = "http://127.0.0.1:9090"
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
	fl.StringVar(&f.file, "store-file", "", "key store file (bbolt); default $"+envKeysFile+" or "+defaultKeysFile())
	fl.StringVar(&f.namespace, "namespace", "", "keep keys as APIKey objects in this Kubernetes namespace instead of a file")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --namespace (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fl.StringVar(&f.context, "context", "", "kubeconfig context for --namespace")
}

func defaultKeysFile() string {
	if p := os.Getenv(envKeysFile); p != "" {
		return p
	}
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "inferplane-keys.db"
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "inferplane", "keys.db")
}

// open opens the chosen store. With mustExist, a store file that does not exist is an error
// (listing or revoking in a mistyped file would otherwise show an empty store); create makes it.
func (f *storeFlags) open(mustExist bool) (keys.Store, string, error) {
	if f.namespace != "" {
		if f.file != "" {
			return nil, "", usageErr(errors.New("--store-file and --namespace choose different stores: pass one"))
		}
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

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys; show their usage",
		Long: `API keys let clients call a tenant's endpoints through Envoy. A key looks like
ipk_<54 characters> and is printed once, when it is created: the store keeps only its
HMAC-SHA256 under the server secret, never the key.

Keys live in a bbolt file (--store-file, the default) or, for clusters with several xDS
server replicas, as APIKey objects in a Kubernetes namespace (--namespace). The server
secret is read from --secret-file or $` + keys.SecretEnv + `; create one with "keys secret".

A key can carry rate limits and token budgets of its own (keys create --requests-per-minute,
--tokens-per-day, ...; keys limit changes them), on top of its tenant's (tenant.yaml
spec.limits); keys usage shows the spend against each.`,
	}
	cmd.AddCommand(newKeysSecretCmd(), newKeysCreateCmd(), newKeysListCmd(), newKeysRevokeCmd(), newKeysUsageCmd(), newKeysLimitCmd(),
		newKeysServeCmd())
	return cmd
}

func newKeysSecretCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "secret",
		Short: "Print a new random server secret (for --secret-file or $" + keys.SecretEnv + ")",
		Long: `Prints 48 random bytes as URL-safe base64. Store it where the xDS server and the
"keys create" command can read it, e.g.:

  inferplane keys secret > /etc/inferplane/keys-secret && chmod 600 /etc/inferplane/keys-secret
  kubectl -n inferplane-system create secret generic inferplane-keys --from-file=secret=/etc/inferplane/keys-secret

Every key is hashed with this secret: replacing it invalidates every key.`,
		Example: `  inferplane keys secret > /etc/inferplane/keys-secret && chmod 600 /etc/inferplane/keys-secret`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := keys.NewSecret()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), s)
			return err
		},
	}
}

func newKeysCreateCmd() *cobra.Command {
	var (
		sf                                                  storeFlags
		kc                                                  keyCheck
		lf                                                  limitFlags
		tenant, endpoint, name, expires, secretFile, output string
	)
	cmd := &cobra.Command{
		Use:   "create --tenant T [--endpoint E] [--name N] [--expires 720h|30d|2027-01-31|RFC3339]",
		Short: "Create a key and print it once",
		Long: `Creates a key for a tenant (all its endpoints, or one with --endpoint) and prints it on
standard output, alone, so that it can be captured:

  KEY=$(inferplane keys create --tenant acme --endpoint qwen3-32b --name ci --expires 90d)

The key is shown this once; the store keeps only its hash.

The tenant and the endpoint must exist: they are looked up in the tenants folder (--tenants,
the generator's input tree: <tenant>/jobs/<job>.yaml) or, when there is none, among the
endpoints a running xDS server knows (--server or $INFERPLANE_SERVER). A name that matches
nothing is refused with the closest known names; --force skips the check (a key for a tenant
not deployed yet). With neither a folder nor a server, the key is created with a warning that
nothing was checked.

` + limitsHelp,
		Example: `  # A key for every endpoint of tenant acme, valid 30 days
  inferplane keys create --tenant acme --expires 30d

  # A trial key: 20 requests a minute, 100,000 tokens a day, 1M a month (warning only)
  inferplane keys create --tenant acme --requests-per-minute 20 --tokens-per-day 100000 \
    --tokens-per-month 1000000 --soft tpmo

  # A key for one endpoint, as JSON (the key and its record)
  inferplane keys create --tenant acme --endpoint qwen3-32b --name ci -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageErr(fmt.Errorf("-o %q: want text or json", output))
			}
			lim, err := lf.spec()
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			exp, err := keys.ParseExpiry(expires, now)
			if err != nil {
				return usageErr(fmt.Errorf("--expires: %w", err))
			}
			req := keys.Request{Tenant: tenant, Endpoint: endpoint, Name: name, ExpiresAt: exp, Limits: lim}
			if errs := req.Check(now); len(errs) > 0 {
				return usageErr(flagErrors(errs, nil, ""))
			}
			secret, err := keys.LoadSecret(secretFile)
			if err != nil {
				return usageErr(err)
			}
			h, err := keys.NewHasher(secret)
			if err != nil {
				return usageErr(err)
			}
			if !kc.force {
				if err := kc.check(cmd, req); err != nil {
					return err
				}
			}
			store, where, err := sf.open(false)
			if err != nil {
				return err
			}
			key, rec, err := keys.Issue(cmd.Context(), store, h, req, now)
			if err != nil {
				return err
			}
			return printCreated(cmd, output, key, rec, where, now)
		},
	}
	sf.register(cmd)
	kc.register(cmd)
	lf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", "", "tenant the key belongs to (required)")
	fl.StringVar(&endpoint, "endpoint", "", "limit the key to this job endpoint (default: every endpoint of the tenant)")
	fl.StringVar(&name, "name", "", "a label for people, e.g. \"ci pipeline\"")
	fl.StringVar(&expires, "expires", "", "expiry: a duration from now (720h, 30d) or a date/time (2027-01-31, RFC 3339); default never")
	fl.StringVar(&secretFile, "secret-file", "", "file holding the server secret (default $"+keys.SecretEnv+")")
	fl.StringVarP(&output, "output", "o", "text", "text (the key alone on stdout) or json")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

// printCreated shows the new key once: alone on stdout (text) or with its record (json), and
// a notice on stderr.
func printCreated(cmd *cobra.Command, output, key string, rec keys.Record, where string, now time.Time) error {
	out := cmd.OutOrStdout()
	if output == "json" {
		return keysJSON(out, struct {
			Key string `json:"key"`
			keyView
		}{key, keyViewOf(rec, now)})
	}
	scope := "every endpoint of " + rec.Tenant
	if rec.Endpoint != "" {
		scope = "endpoint " + rec.Endpoint + " of " + rec.Tenant
	}
	expiry := "never expires"
	if !rec.ExpiresAt.IsZero() {
		expiry = "expires " + rec.ExpiresAt.Format(time.RFC3339)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Created key %s for %s (%s; %s) in %s.\nThis is the only time the key is shown: store it now.\n",
		rec.ID, scope, expiry, describeLimits(rec.Limits), where)
	_, err := fmt.Fprintln(out, key)
	return err
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
		sf                     storeFlags
		tenant, status, output string
	)
	cmd := &cobra.Command{
		Use:   "list [--tenant T] [--status active|revoked|expired] [-o table|json]",
		Short: "List keys (ids and status; never the keys themselves)",
		Example: `  # Every key in the default store
  inferplane keys list

  # Tenant acme's active keys, as JSON, from the APIKey objects of a cluster
  inferplane keys list --tenant acme --status active -o json --namespace inferplane-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return usageErr(fmt.Errorf("-o %q: want table or json", output))
			}
			switch keys.Status(status) {
			case "", keys.StatusActive, keys.StatusRevoked, keys.StatusExpired:
			default:
				return usageErr(fmt.Errorf("--status %q: want active, revoked or expired", status))
			}
			store, _, err := sf.open(true)
			if err != nil {
				return err
			}
			recs, err := store.List(cmd.Context())
			if err != nil {
				return err
			}
			now := time.Now()
			views := []keyView{}
			for _, r := range recs {
				v := keyViewOf(r, now)
				if (tenant == "" || r.Tenant == tenant) && (status == "" || string(v.Status) == status) {
					views = append(views, v)
				}
			}
			if output == "json" {
				return keysJSON(cmd.OutOrStdout(), views)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTENANT\tENDPOINT\tNAME\tSTATUS\tCREATED\tEXPIRES")
			for _, v := range views {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Tenant, cmp.Or(v.Endpoint, "*"), cmp.Or(v.Name, "-"),
					v.Status, v.CreatedAt.Format(time.RFC3339), keysTimeOr(v.ExpiresAt, "never"))
			}
			return tw.Flush()
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's keys")
	cmd.Flags().StringVar(&status, "status", "", "only keys in this status")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func newKeysRevokeCmd() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "revoke ID...",
		Short: "Revoke keys (a soft delete: the record and its usage stay)",
		Long: `Revokes keys by id. Every xDS server watching the store refuses them within a second.
The record stays, listed as revoked, so usage recorded against the id keeps its owner.`,
		Example: `  # Revoke two keys by the ids keys list shows
  inferplane keys revoke 3f9a0c1d2e4b5a69 7c21d0e9f8a6b543

  # In a store file other than the default
  inferplane keys revoke --store-file /srv/inferplane/keys.db 3f9a0c1d2e4b5a69`,
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
			store, _, err := sf.open(true)
			if err != nil {
				return err
			}
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
		},
	}
	sf.register(cmd)
	return cmd
}

func newKeysUsageCmd() *cobra.Command {
	var tenant, key, since, output string
	var servers []string
	var hourly bool
	cmd := &cobra.Command{
		Use:   "usage [--tenant T] [--key ID] [--since 24h] [--hourly] [--server URL]... [-o table|json]",
		Short: "Show requests and tokens per key, from running xDS servers",
		Long: `Reads per-key usage (requests, tokens in and out, per hour) from the HTTP endpoint of a
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
			if output != "table" && output != "json" {
				return usageErr(fmt.Errorf("-o %q: want table or json", output))
			}
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
			if output == "json" {
				return keysJSON(cmd.OutOrStdout(), struct {
					usage.UsageReport
					Limits []limits.LimitStatus `json:"limits"`
				}{rep, lim.Limits})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
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
			if err := tw.Flush(); err != nil {
				return err
			}
			return printLimits(cmd.OutOrStdout(), lim)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", "", "only this tenant's keys")
	fl.StringVar(&key, "key", "", "only this key id")
	fl.StringVar(&since, "since", "", "from this long ago (24h) or this RFC 3339 time; default everything kept")
	fl.BoolVar(&hourly, "hourly", false, "one row per key and hour")
	fl.StringArrayVar(&servers, "server", []string{serverURLDefault()}, "base URL of an xDS server's HTTP endpoint; repeat for each server replica ($"+envServerURL+")")
	fl.StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func serverURLDefault() string {
	if s := os.Getenv(envServerURL); s != "" {
		return s
	}
	return defaultServerURL
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

func keysJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func keysTimeOr(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.Format(time.RFC3339)
}
