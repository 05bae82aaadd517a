package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/gateway/install"
)

func newGatewayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "The gateway (xDS servers, key checks, Envoy) in the host cluster: its install manifests, Envoy's drain",
		Long: `The gateway is inferplane's serving half in the host cluster: xDS servers that watch every tenant
cluster Argo CD knows (xds serve --source clusters) and count usage, key checks that Envoy asks
about every request (keys serve), and the Envoys they configure, behind a Service of type
LoadBalancer. See docs/xds.md.`,
		Example: `  inferplane gateway manifests --domain inference.example.com | kubectl apply -f -`,
	}
	cmd.AddCommand(newGatewayManifestsCmd(), newGatewayEnvoyDrainerCmd())
	return cmd
}

// registerInstallFlags are the install options as flags, shared with generate --gateway-dir.
func registerInstallFlags(f *pflag.FlagSet, o *install.Options, prefix string) {
	f.StringVar(&o.Namespace, prefix+"namespace", install.DefaultNamespace, "Kubernetes namespace of the gateway's objects")
	f.StringVar(&o.Name, prefix+"name", install.DefaultName, "name of the gateway: the prefix of its objects (<name>-xds, <name>-envoy)")
	f.StringVar(&o.Image, prefix+"image", install.DefaultImage, "container image of inferplane that the xDS servers run")
	f.StringVar(&o.EnvoyImage, prefix+"envoy-image", install.DefaultEnvoyImage, "container image of Envoy")
	f.Int32Var(&o.Replicas, prefix+"replicas", install.DefaultReplicas, "number of xDS servers")
	f.Int32Var(&o.EnvoyReplicas, prefix+"envoy-replicas", install.DefaultReplicas, "number of Envoys")
	f.Int32Var(&o.KeyCheckReplicas, prefix+"key-check-replicas", install.DefaultReplicas, "number of key checks (keys serve)")
	f.StringVar(&o.ArgoCDNamespace, prefix+"argocd-namespace", "argocd", "namespace of Argo CD's cluster Secrets, the registry of tenant clusters (- reads none)")
	f.StringSliceVar(&o.VClusterNamespaces, prefix+"vcluster-namespace", nil, "host namespace of vCluster's kubeconfig Secrets vc-<name> (repeatable)")
	f.StringVar(&o.KeySecret, prefix+"key-secret", "", "Secret (key \"secret\") holding the API key secret (default <name>-keys)")
	f.StringVar(&o.UsageSize, prefix+"usage-size", install.DefaultUsageSize, "volume of each xDS server's usage ledger")
	f.StringVar(&o.StorageClass, prefix+"storage-class", "", "storage class of the usage and meter volumes (default: the cluster's)")
	f.StringVar(&o.MeterSize, prefix+"meter-size", install.DefaultMeterSize, "volume of the GPU meter's records")
	f.BoolVar(&o.NoMeter, prefix+"no-meter", false, "no GPU meter (meter serve) beside the gateway: gateway manifests leaves it out, api manifests gives api serve no --meter")
	f.StringVar(&o.LoadBalancerClass, prefix+"load-balancer-class", "", "loadBalancerClass of Envoy's Service")
	f.StringToStringVar(&o.ServiceAnnotations, prefix+"service-annotation", nil, "annotation of Envoy's Service, key=value (repeatable)")
}

func newGatewayManifestsCmd() *cobra.Command {
	var (
		o             install.Options
		output        string
		limitsTenants string
	)
	cmd := &cobra.Command{
		Use:   "manifests",
		Short: "Print the gateway's install manifests (YAML)",
		Long: `manifests prints, as one YAML stream in apply order, what runs the gateway in the host cluster:

  the xDS servers   a StatefulSet (2 replicas, a volume each for its usage ledger and its
                    tenant clusters' last known good replicas) running xds serve --source
                    clusters, its ServiceAccount, Roles that let it read the cluster Secrets
                    (Argo CD's namespace, vCluster's) and the TLS Secrets of its namespace and
                    nothing else, a Service (gRPC 18000 for Envoy and its access logs; admin 9090
                    for probes and metrics), a headless Service naming each replica, a
                    PodDisruptionBudget
  the key checks    a Deployment (2 replicas) running keys serve, which may only read the
                    APIKey objects, a headless Service (gRPC 18001) over which Envoy spreads its
                    key checks with gRPC health checks, a PodDisruptionBudget
  Envoy             a Deployment (2 replicas) started from xds bootstrap's bootstrap in a
                    ConfigMap, drained on termination (gateway envoy-drainer beside it), a
                    PodDisruptionBudget, and a Service of type LoadBalancer (80 and 443)
  the GPU meter     a StatefulSet of one meter serve (one writer of its records, on a volume of
                    its own), which reads the same cluster Secrets as the xDS servers and the
                    keys' token counts from each of them, and a Service (admin 9095: what api
                    serve --meter points at); --no-meter leaves it out. It changes the tenant
                    clusters' VMIs (its finalizer) with their own credentials from the registry

  the limits store a StatefulSet of one Redis (its append-only file on a volume) and its
                    Service, which every xDS server shares for rate limits and token budgets;
                    with --limits-tenants, the tenants' limits (their tenant.yaml) in ConfigMaps
                    <name>-tenant-limits-<i> (as many as keep each under 200 KiB, labelled
                    inferplane.io/tenant-limits=<name> for kubectl apply --prune -l) mounted as
                    one flat folder, the --limits-tenants of the xDS servers and key checks; with
                    a provider tenant (the shared serving tier) every tenant's file and the
                    provider's jobs, from which the key checks learn who may call its shared
                    endpoints

The API key secret is not in them (secrets never go to git): the header says how to create it.
TLS certificates are the kubernetes.io/tls Secrets of the gateway's namespace (e.g. written by
cert-manager): one for *.<tenant>.<domain> per tenant, or per endpoint host.`,
		Example: `  inferplane gateway manifests --domain inference.example.com | kubectl apply -f -

  # vCluster kubeconfig Secrets as well as Argo CD's cluster Secrets
  inferplane gateway manifests --domain inference.example.com --vcluster-namespace vcluster-acme --file gateway.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limitsTenants != "" {
				t, err := limits.TenantFilesWithLimits(limitsTenants)
				if err != nil {
					return usageErr(fmt.Errorf("--limits-tenants: %w", err))
				}
				o.TenantLimits = t
			}
			y, err := install.YAML(o)
			if err != nil {
				return usageErr(err)
			}
			return writeOut(cmd, output, y, 0o644)
		},
	}
	f := cmd.Flags()
	addDomainFlag(f, &o.Domain, true)
	registerInstallFlags(f, &o, "")
	addFileFlag(cmd, &output)
	f.StringVar(&limitsTenants, "limits-tenants", "", limitsTenantsUsage+" (mounted from ConfigMaps)")
	_ = cmd.MarkFlagRequired("domain")
	return cmd
}
