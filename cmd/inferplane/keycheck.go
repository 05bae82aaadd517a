package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/lifecycle/gateway"
)

// keyCheck holds the flags keys create checks --tenant and --endpoint with.
type keyCheck struct {
	tenantsDir string
	server     string
	force      bool
}

func (k *keyCheck) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&k.tenantsDir, "tenants", "tenants", usageTenants)
	addServerFlag(fl, &k.server)
	fl.BoolVar(&k.force, "force", false, "do it although a check refuses: create the key without checking that the tenant and endpoint exist")
}

// check refuses a tenant or endpoint that matches nothing known, with the closest names, and
// refuses to issue a key when nothing can be known (no tenants folder, no gateway, or a gateway
// that does not answer): a key for a tenant that does not exist is a mistake --force must ask for.
func (k *keyCheck) check(cmd *cobra.Command, req keys.Request) error {
	known, where, err := k.known(cmd, req)
	if err != nil {
		return err
	}
	if errs := req.CheckScope(known, where); len(errs) > 0 {
		return usageErr(flagErrors(errs, nil, "; --force creates the key anyway"))
	}
	return nil
}

// known lists the tenants and their jobs: from the tenants folder when it exists, else from
// the endpoints of the xDS server given by --server or $INFERPLANE_SERVER.
func (k *keyCheck) known(cmd *cobra.Command, req keys.Request) (map[string][]string, string, error) {
	if info, err := os.Stat(k.tenantsDir); err == nil && info.IsDir() {
		in, err := inputs.Load(os.DirFS(k.tenantsDir), k.tenantsDir)
		if err != nil {
			return nil, "", fmt.Errorf("--tenants %s: %w", k.tenantsDir, err)
		}
		out := map[string][]string{}
		for _, t := range in.Tenants {
			jobs := []string{}
			for _, j := range t.Jobs {
				jobs = append(jobs, j.Object.Name)
			}
			out[t.Object.Name] = jobs
		}
		return out, "the tenants folder " + k.tenantsDir, nil
	} else if cmd.Flags().Changed("tenants") {
		return nil, "", usageErr(fmt.Errorf("--tenants %s: not a folder", k.tenantsDir))
	}
	if !cmd.Flags().Changed("server") && os.Getenv(envServerURL) == "" {
		return nil, "", usageErr(fmt.Errorf("--tenant %s cannot be checked: no tenants folder at %s and no gateway given; "+
			"pass --tenants DIR or --server URL to check it, or --force to create the key unchecked (no key was created)", req.Tenant, k.tenantsDir))
	}
	rep, err := gateway.Client{BaseURL: k.server}.Health(cmd.Context(), "")
	if err != nil {
		return nil, "", fmt.Errorf("--tenant %s cannot be checked: no tenants folder at %s, and %w; no key was created "+
			"(--force creates it unchecked)", req.Tenant, k.tenantsDir, gatewayErr(err))
	}
	out := map[string][]string{}
	for _, e := range rep.Endpoints {
		out[e.Tenant] = append(out[e.Tenant], e.Job)
	}
	for t := range out {
		slices.Sort(out[t])
	}
	return out, "the endpoints of the xDS server at " + strings.TrimRight(k.server, "/"), nil
}
