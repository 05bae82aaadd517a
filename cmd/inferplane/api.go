package main

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/internal/version"
	"github.com/inferplane/inferplane/lifecycle/cluster"
	"github.com/inferplane/inferplane/productapi"
	apiinstall "github.com/inferplane/inferplane/productapi/install"
)

func newAPICmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "api",
		Short: "The product API: the customers' front door (serve it, print its install)",
		Long: `The product API lets customers create jobs, mint API keys and read usage and health on their
own, signed in with OIDC, without the operator's files or kubeconfigs. Every write is a git
commit of the inputs, checked by the rules generate applies. See docs/api.md.`,
		Example: `  inferplane api serve --oidc-issuer https://login.example.com --oidc-client-id inferplane \
      --inputs-repo https://git.example.com/ops/inputs.git --kubeconfig host.kubeconfig
  inferplane api manifests --domain models.example.com --oidc-issuer https://login.example.com \
      --oidc-client-id inferplane --inputs-repo https://git.example.com/ops/inputs.git --file api.yaml`,
	}
	cmd.AddCommand(newAPIServeCmd(), newAPIManifestsCmd())
	return cmd
}

type apiServeFlags struct {
	c           productapi.Config
	kube        cluster.Kubeconfig
	inCluster   bool
	registry    registryFlags
	logLevel    string
	logFormat   string
	adminGroups []string
	gateways    []string
	console     consoleFlags
}

func newAPIServeCmd() *cobra.Command {
	var f apiServeFlags
	cmd := &cobra.Command{
		Use:   "serve --oidc-issuer URL --oidc-client-id ID --inputs-repo URL",
		Short: "Serve the product API (JSON under /api/v1, OpenAPI at /api/v1/openapi.json)",
		Long: `serve runs one replica of the product API; run several behind a Service: each keeps its own
clone of the inputs, and every write is one git commit pushed with the old head expected, so
replicas never overwrite each other.

Sign-in: OIDC ID tokens of --oidc-issuer issued for --oidc-client-id (Authorization: Bearer).
Roles per tenant come from spec.access of each tenant.yaml; --admin-group members are admin
in every tenant.

The inputs (recipes/, tenants/) live in the git repository --inputs-repo; credentials come
from --inputs-credentials-file (user:token, or a token), never from a flag value. A write
commits the inputs as the caller, then renders and pushes that tenant's repository, as generate
would (--repo-url, --guest-image, --storage-class must be generate's). The tenants' spec.git.auth
variables are read from files in --tenant-credentials-dir, else the environment.

Without a host cluster (no --kubeconfig, --context or --in-cluster) everything but the clusters
is served: jobs show stage unknown with the reason, restart is refused. With one, the stages
come from watches of the cluster registry, Argo CD's Applications and each tenant cluster's VMs.

API keys minted here go to APIKey objects in --keys-namespace of the host cluster (every gateway
replica sees them), or, without a host cluster, to the bbolt file --keys-file that a local
xds serve reads; the HMAC secret is --keys-secret-file (else $INFERPLANE_KEYS_SECRET).

The web console is served at / (docs/console.md; --no-console turns it off): users sign in with
the same provider (auth code with PKCE, as the client --console-client-id, default
--oidc-client-id, whose redirect URIs must hold <--console-url>/auth/callback), and it reads and
writes through this API in process, with the same roles and refusals. --console-dev signs in
whoever types a name, on 127.0.0.1 only; make console runs it on the bundled examples.

Several replicas with --peer-url and --peer-token-file hand their writes to the one that pushed
last: the others post them to its --peer-listen (default :8081 with --peer-url), a port of its
own that serves that route only, to holders of the token; --listen answers it 404 like any path
it does not serve. Let only the replicas reach the peer port (api manifests' NetworkPolicy).

/healthz answers while the process runs, /readyz once the inputs were fetched, /metrics is
Prometheus (all on --listen). SIGTERM finishes requests in flight on both ports
(--shutdown-timeout).`,
		Example: `  # On a laptop: inputs in a local bare repository, Dex on localhost, no cluster
  inferplane api serve --oidc-issuer http://127.0.0.1:5556/dex --oidc-client-id inferplane \
      --inputs-repo file:///srv/git/inputs.git --keys-file ~/.local/share/inferplane/keys.db \
      --keys-secret-file ~/.config/inferplane/keys-secret --server http://127.0.0.1:9090

  # Against the host cluster of the current kubeconfig context
  inferplane api serve --oidc-issuer https://login.example.com --oidc-client-id inferplane \
      --inputs-repo https://git.example.com/ops/inputs.git --inputs-credentials-file /etc/inferplane/inputs \
      --context mgmt --domain models.example.com --admin-group platform-ops`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAPIServe(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.c.Listen, "listen", "127.0.0.1:8080", "address the API listens on (host:port; :8080 for every interface)")
	fl.StringVar(&f.c.OIDC.Issuer, "oidc-issuer", "", "the OIDC provider's issuer URL (required)")
	fl.StringVar(&f.c.OIDC.ClientID, "oidc-client-id", "", "the API's OIDC client id: tokens must be issued for it (required)")
	fl.StringVar(&f.c.OIDC.GroupsClaim, "oidc-groups-claim", access.DefaultGroupsClaim, "the token claim with the caller's groups")
	fl.StringArrayVar(&f.adminGroups, "admin-group", nil, "a group of the operator: admin in every tenant (repeatable)")
	fl.StringVar(&f.c.Inputs.URL, "inputs-repo", "", "the inputs' git repository: https://, http:// or file:// (required)")
	fl.StringVar(&f.c.Inputs.Branch, "inputs-branch", "main", "the inputs' branch")
	fl.StringVar(&f.c.Inputs.CredentialsFile, "inputs-credentials-file", "", "file with the inputs repository's credentials: user:token, or a token")
	fl.StringVar(&f.c.WorkDir, "work-dir", "", "folder of this replica's work trees of the tenant repositories (default: a temporary folder)")
	fl.StringVar(&f.c.Domain, "domain", os.Getenv("INFERPLANE_DOMAIN"), "endpoints are https://<job>.<tenant>.<domain> ($INFERPLANE_DOMAIN)")
	fl.StringVar(&f.c.RepoURL, "repo-url", "", "URL Argo CD pulls a tenant's repository from when the tenant sets no spec.git.url ({tenant} is replaced)")
	fl.StringVar(&f.c.GuestImage, "guest-image", "", "golden VM disk (containerDisk image) for node types that name none")
	fl.StringVar(&f.c.StorageClass, "storage-class", "", "storage class of the model-cache volumes (default: the tenant cluster's default class)")
	fl.StringVar(&f.c.TenantCredentialsDir, "tenant-credentials-dir", "", "folder with a file per variable the tenants' spec.git.auth names (a mounted Secret)")
	fl.StringVar(&f.kube.Path, "kubeconfig", "", "kubeconfig file of the host cluster (Argo CD, the cluster registry)")
	fl.StringVar(&f.kube.HostContext, "context", "", "kubeconfig context of the host cluster")
	fl.BoolVar(&f.inCluster, "in-cluster", false, "the host cluster is the one this pod runs in (its service account)")
	f.registry.register(fl, "with a host cluster")
	fl.StringVar(&f.c.KeysNamespace, "keys-namespace", productapi.DefaultKeysNamespace, "read API keys from APIKey objects in this Kubernetes namespace instead of a file")
	fl.StringVar(&f.c.KeysFile, "keys-file", "", "API key store file (bbolt) to keep keys in instead of --keys-namespace (one API replica; what a local xds serve --keys-file reads)")
	fl.StringVar(&f.c.KeysSecretFile, "keys-secret-file", "", "file with the API keys' HMAC secret (else $INFERPLANE_KEYS_SECRET)")
	fl.StringArrayVar(&f.gateways, "server", nil, "the gateway: base URL of the xDS server's admin address; repeat it for each server replica (usage and health are summed)")
	deprecatedAlias(fl, "gateway", "server")
	fl.StringVar(&f.c.Meter, "meter", "", "the meter: base URL of inferplane meter serve's admin address (the usage route's GPU-seconds, groupBy and what the quota leaves)")
	fl.DurationVar(&f.c.RefreshInterval, "refresh-interval", 2*time.Second, "how often the inputs are fetched for reads")
	fl.DurationVar(&f.c.ReconcileInterval, "reconcile-interval", 30*time.Second, "how often every tenant repository is compared with the inputs and rendered when behind")
	fl.StringVar(&f.c.PeerURL, "peer-url", "", "where the other API replicas reach this one's --peer-listen (the install: http://$(POD_NAME).inferplane-api-pods.<namespace>.svc:8081): with --peer-token-file, writes are handed to the replica that pushed last (docs/design.md)")
	fl.StringVar(&f.c.PeerTokenFile, "peer-token-file", "", "file with the secret the API replicas share to hand writes to each other (with --peer-url)")
	fl.StringVar(&f.c.PeerListen, "peer-listen", "", "address the other replicas hand writes to, a port apart from --listen (host:port; default "+productapi.DefaultPeerListen+"); only with --peer-url: without peers nothing listens")
	fl.DurationVar(&f.c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "how long in-flight requests may take to finish after SIGINT or SIGTERM")
	fl.IntVar(&f.c.Bounds.Conns.MaxPerClient, "max-connections-per-client", 0, "connections one client IP address may hold open (0: no bound, for an API behind a proxy, where every client has the proxy's address)")
	f.console.register(fl)
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	return cmd
}

func runAPIServe(cmd *cobra.Command, f *apiServeFlags) error {
	var errs []error
	for _, req := range []struct{ flag, val string }{{"--oidc-issuer", f.c.OIDC.Issuer}, {"--oidc-client-id", f.c.OIDC.ClientID}, {"--inputs-repo", f.c.Inputs.URL}} {
		if req.val == "" && !(f.console.dev && strings.HasPrefix(req.flag, "--oidc")) {
			errs = append(errs, fmt.Errorf("%s is required", req.flag))
		}
	}
	errs = append(errs, f.console.check(&f.c)...)
	if f.c.Bounds.Conns.MaxPerClient < 0 {
		errs = append(errs, fmt.Errorf("--max-connections-per-client is %d: want 0 (no bound) or more", f.c.Bounds.Conns.MaxPerClient))
	}
	if f.inCluster && (f.kube.Path != "" || f.kube.HostContext != "") {
		errs = append(errs, errors.New("--in-cluster reads no kubeconfig: drop --kubeconfig and --context"))
	}
	errs = append(errs, checkPeer(f.c)...)
	reg, err := f.registry.options()
	if err != nil {
		errs = append(errs, err)
	} else if err := reg.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--argocd-namespace/--vcluster-namespace: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return usageErr(err)
	}
	log, err := xdsLogger(cmd, f.logLevel, f.logFormat)
	if err != nil {
		return usageErr(err)
	}
	c := f.c
	c.Registry, c.AdminGroups, c.Gateways, c.Logger, c.Version = reg, f.adminGroups, f.gateways, log, version.Get().Version
	if err := f.console.apply(&c, log); err != nil {
		return err
	}
	switch {
	case f.inCluster:
		if c.Host, err = rest.InClusterConfig(); err != nil {
			return fmt.Errorf("--in-cluster: %w", err)
		}
	case f.kube.Path != "" || f.kube.HostContext != "":
		if c.Host, err = f.kube.Host(cmd.Context()); err != nil {
			return err
		}
	default:
		c.HostMissing = "this API server runs without a host cluster (api serve without --kubeconfig, --context or --in-cluster), so the clusters are not read"
	}
	return productapi.Serve(cmd.Context(), c)
}

// registerAPIInstallFlags are the API's install options as flags, shared with generate
// --gateway-dir (prefix "api-").
func registerAPIInstallFlags(f *pflag.FlagSet, o *apiinstall.Options, prefix string) {
	f.StringVar(&o.Issuer, prefix+"oidc-issuer", "", "the OIDC provider's issuer URL")
	f.StringVar(&o.ClientID, prefix+"oidc-client-id", "", "the API's OIDC client id")
	f.StringArrayVar(&o.AdminGroups, prefix+"admin-group", nil, "a group of the operator (repeatable)")
	f.StringVar(&o.InputsRepo, prefix+"inputs-repo", "", "the inputs' git repository (https://)")
	f.StringVar(&o.InputsBranch, prefix+"inputs-branch", "", "the inputs' branch (default main)")
	f.Int32Var(&o.Replicas, prefix+"replicas", apiinstall.DefaultReplicas, "number of API replicas")
	f.StringVar(&o.Image, prefix+"image", "", "container image of inferplane the API runs (default this build's)")
	f.BoolVar(&o.NoConsole, prefix+"no-console", false, "serve the API only, without the web console at /")
	f.StringVar(&o.ConsoleURL, prefix+"console-url", "", "where browsers reach the console, an https:// URL (default https://api.<domain>); the provider sends them back to <url>/auth/callback")
	f.StringVar(&o.ConsoleClientID, prefix+"console-client-id", "", "the console's OIDC client id (default --"+prefix+"oidc-client-id); <console-url>/auth/callback must be among its redirect URIs")
	f.BoolVar(&o.ConsoleConfidential, prefix+"console-confidential-client", false, "the console's OIDC client has a secret: read from the console's Secret (key "+apiinstall.ClientSecretKey+")")
	f.StringVar(&o.ConsoleGateway, prefix+"console-gateway", "", "where the playground sends the endpoints' requests, with the endpoint's host name: host:port of the gateway's TLS listener (default its Envoy Service, <gateway-name>-envoy.<namespace>.svc:443)")
}

func newAPIManifestsCmd() *cobra.Command {
	var (
		o      apiinstall.Options
		output string
	)
	cmd := &cobra.Command{
		Use:   "manifests --domain D --oidc-issuer URL --oidc-client-id ID --inputs-repo URL",
		Short: "Print the product API's install manifests (YAML)",
		Long: `manifests prints, as one YAML stream in apply order, what runs the product API in the host
cluster, beside the gateway (same namespace): a StatefulSet of api serve (2 replicas), its
Service (port 8080), a headless Service <name>-pods naming each replica, a PodDisruptionBudget,
a ServiceAccount and Roles (APIKey objects in its namespace; read the cluster registry's Secrets
and Argo CD's Applications). Its Secrets are not in them (the header says how to create them).

With more than one replica, the replicas hand their writes to the one that pushed last (api
serve --peer-listen --peer-url --peer-token-file): each takes them on a port of its own, 8081
(container port "peers"), which the headless Service carries and the customers' Service does
not, reached at its pod's name (http://<name>-<i>.<name>-pods.<namespace>.svc:8081), and all
share the token of one Secret (<name>-peers, key token), mounted as a file. A NetworkPolicy
(<name>) lets only the API's own pods reach 8081 and leaves 8080 open to all. --replicas 1 has
no peers: no peer port, no NetworkPolicy, no such Secret. An install that ran the API as a
Deployment: delete it once the StatefulSet runs.

The web console is served with the API, as api serve serves it: at --console-url (default
https://api.<domain>, where the API answers), signing in with the provider as
--console-client-id, whose redirect URIs must hold <console-url>/auth/callback. Every replica
seals and opens sessions with the keys of one Secret (<name>-console, key session-keys), so a
browser signed in at one replica is signed in at all of them; a pod does not start until that
Secret exists. --no-console serves the API only.`,
		Example: `  kubectl -n inferplane-system create secret generic inferplane-api-console --from-file=session-keys=<(openssl rand -hex 32)
  kubectl -n inferplane-system create secret generic inferplane-api-peers --from-file=token=<(openssl rand -hex 32)
  inferplane api manifests --domain models.example.com --oidc-issuer https://login.example.com \
      --oidc-client-id inferplane --inputs-repo https://git.example.com/ops/inputs.git | kubectl apply -f -

  # The console at its own host name, signing in as a confidential client of its own
  inferplane api manifests --domain models.example.com --oidc-issuer https://login.example.com \
      --oidc-client-id inferplane --inputs-repo https://git.example.com/ops/inputs.git \
      --console-url https://console.example.com --console-client-id inferplane-console --console-confidential-client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			y, err := apiinstall.YAML(o)
			if err != nil {
				return usageErr(err)
			}
			return writeOut(cmd, output, y, 0o644)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Domain, "domain", "", "endpoints are https://<job>.<tenant>.<domain>; the API answers at api.<domain> (required)")
	fl.StringVar(&o.Namespace, "namespace", "", "Kubernetes namespace of the API's objects, the gateway's (default inferplane-system)")
	fl.StringVar(&o.Gateway, "gateway-name", "", "name of the gateway: the prefix of its objects (<name>-xds, <name>-envoy; default inferplane-gateway)")
	fl.Int32Var(&o.GatewayReplicas, "gateway-replicas", 0, "number of xDS servers (default 2)")
	fl.BoolVar(&o.NoMeter, "no-meter", false, "no GPU meter (meter serve) beside the gateway: gateway manifests leaves it out, api manifests gives api serve no --meter")
	fl.StringVar(&o.ArgoCDNamespace, "argocd-namespace", "", "namespace of Argo CD's cluster Secrets and Applications (default argocd)")
	fl.StringSliceVar(&o.VClusterNamespaces, "vcluster-namespace", nil, "host namespace of vCluster kubeconfig Secrets (repeatable)")
	registerAPIInstallFlags(fl, &o, "")
	addFileFlag(cmd, &output)
	return cmd
}

// apiInstallWanted says whether generate was asked to write the API's install.
func apiInstallWanted(o apiinstall.Options) bool {
	return strings.TrimSpace(o.Issuer+o.ClientID+o.InputsRepo) != ""
}

// checkPeer checks the write hand-over's flags: URL and token both or neither, a URL the other
// replicas can post to, and a peer listener apart from the customers' only when there are peers.
func checkPeer(c productapi.Config) []error {
	if (c.PeerURL == "") != (c.PeerTokenFile == "") {
		return []error{errors.New("--peer-url and --peer-token-file go together: give both to hand writes to the replica that pushed last, or neither")}
	}
	if c.PeerURL == "" {
		if c.PeerListen != "" {
			return []error{fmt.Errorf("--peer-listen %s without --peer-url: nothing listens for peers when there are none", c.PeerListen)}
		}
		return nil
	}
	if u, err := url.Parse(c.PeerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return []error{fmt.Errorf("--peer-url %q: expected http(s)://host:port where the other replicas reach this one, without credentials", c.PeerURL)}
	}
	if pl := cmp.Or(c.PeerListen, productapi.DefaultPeerListen); pl == c.Listen {
		return []error{fmt.Errorf("--peer-listen %s is --listen's address: the peers' route is served on a port of its own, which customers do not reach", pl)}
	}
	return nil
}
