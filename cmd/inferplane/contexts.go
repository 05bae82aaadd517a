package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newConfigCmd is `inferplane config`: the contexts login makes, as kubectl's.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "The product API contexts login made: list, show and switch them",
		Long: `config lists and switches the contexts inferplane login makes (a product API server, the
identity provider it trusts, a default tenant), kept in $XDG_CONFIG_HOME/inferplane/config.yaml
(mode 0600; $INFERPLANE_CONFIG_DIR overrides the folder). With a current context, jobs, keys,
usage, health and models call that server's API; --tenants makes them work on the operator's
files instead.`,
		Example: `  inferplane config get-contexts
  inferplane config use-context api.models.example.com
  inferplane config current-context
  inferplane config set-context dev --tenant globex`,
	}
	cmd.AddCommand(newGetContextsCmd(), newUseContextCmd(), newCurrentContextCmd(), newSetContextCmd(), newDeleteContextCmd())
	return cmd
}

// contextRow is a context as get-contexts prints it.
type contextRow struct {
	Current  bool   `json:"current"`
	Name     string `json:"name"`
	Server   string `json:"server"`
	User     string `json:"user,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Issuer   string `json:"issuer"`
	SignedIn string `json:"signedIn" doc:"valid, expired (refreshed on use), or no"`
}

func newGetContextsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts (the current one marked *)",
		Example: `  inferplane config get-contexts
  inferplane config get-contexts -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output, "table", "json", "yaml", "name"); err != nil {
				return err
			}
			store, cfg, err := loadContexts()
			if err != nil {
				return err
			}
			rows := make([]contextRow, 0, len(cfg.Contexts))
			for _, c := range cfg.Contexts {
				r := contextRow{Current: c.Name == cfg.CurrentContext, Name: c.Name, Server: c.Server, User: c.User, Tenant: c.Tenant, Issuer: c.Issuer, SignedIn: "no"}
				if t, err := store.Tokens(c.Name); err == nil {
					r.SignedIn = "valid"
					if !time.Now().Before(t.Expiry) {
						r.SignedIn = "expired"
					}
				}
				rows = append(rows, r)
			}
			return printRows(cmd.OutOrStdout(), output, rows, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER\tUSER\tTENANT\tSIGNED IN")
				for _, r := range rows {
					cur := ""
					if r.Current {
						cur = "*"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cur, r.Name, r.Server, r.User, r.Tenant, r.SignedIn)
				}
				tw.Flush()
			}, func(r contextRow) string { return r.Name })
		},
	}
	registerOutput(cmd, &output, "table", "", "table", "json", "yaml", "name")
	return cmd
}

func newUseContextCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "use-context NAME",
		Short:   "Make a context the current one",
		Example: `  inferplane config use-context api.models.example.com`,
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, cfg, err := loadContexts()
			if err != nil {
				return err
			}
			if _, ok := cfg.Get(args[0]); !ok {
				return usageErr(noContext(args[0], cfg))
			}
			cfg.CurrentContext = args[0]
			if err := store.Save(cfg); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Switched to context %q.\n", args[0])
			return nil
		},
	}
}

func newCurrentContextCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "current-context",
		Short:   "Print the current context's name",
		Example: `  inferplane config current-context`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, cfg, err := loadContexts()
			if err != nil {
				return err
			}
			if _, ok := cfg.Current(); !ok {
				return noContext("", cfg)
			}
			fmt.Fprintln(cmd.OutOrStdout(), cfg.CurrentContext)
			return nil
		},
	}
}

func newSetContextCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:     "set-context NAME --tenant T",
		Short:   "Change a context's default tenant",
		Example: `  inferplane config set-context api.models.example.com --tenant globex`,
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, cfg, err := loadContexts()
			if err != nil {
				return err
			}
			c, ok := cfg.Get(args[0])
			if !ok {
				return usageErr(noContext(args[0], cfg))
			}
			c.Tenant = tenant
			cfg.Set(c)
			return store.Save(cfg)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant the context's commands act on when given none (empty: none)")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

func newDeleteContextCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete-context NAME",
		Short:   "Delete a context and its tokens",
		Example: `  inferplane config delete-context dev`,
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, cfg, err := loadContexts()
			if err != nil {
				return err
			}
			if !cfg.Delete(args[0]) {
				return usageErr(noContext(args[0], cfg))
			}
			if err := store.DeleteTokens(args[0]); err != nil {
				return err
			}
			return store.Save(cfg)
		},
	}
}

// exactArgs is cobra.ExactArgs worded with the argument's name, as a usage error.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr(fmt.Errorf("%s takes %s (got %d arguments)", cmd.CommandPath(), names, len(args)))
		}
		return nil
	}
}

// checkFormat refuses an -o the command does not print (a usage error).
func checkFormat(output string, formats ...string) error {
	for _, f := range formats {
		if output == f {
			return nil
		}
	}
	return usageErr(fmt.Errorf("-o %q: expected one of %v", output, formats))
}

// printRows prints rows as a table (table draws it), JSON, YAML, or one name a line.
func printRows[T any](w io.Writer, output string, rows []T, table func(io.Writer), name func(T) string) error {
	switch output {
	case "json", "yaml":
		return printData(w, output, rows)
	case "name":
		for _, r := range rows {
			fmt.Fprintln(w, name(r))
		}
		return nil
	}
	table(w)
	return nil
}
