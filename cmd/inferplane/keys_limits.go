package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/lifecycle/gateway"
)

// limitFlags are a key's limits on the command line (keys create, keys limit).
type limitFlags struct {
	values [limits.NumKinds]int64
	soft   []string
}

var limitFlagNames = [limits.NumKinds]string{"requests-per-minute", "tokens-per-minute", "tokens-per-day", "tokens-per-week", "tokens-per-month"}

const limitsHelp = `Limits (each 0 or absent: none; tokens are prompt plus completion tokens as the responses
report them; minutes are UTC minutes, days, weeks from Monday and calendar months start at
midnight in the tenant's time zone, spec.limits.timeZone of its tenant.yaml):

  --requests-per-minute N   at most N requests a minute
  --tokens-per-minute N     at most N tokens a minute
  --tokens-per-day N        a budget of N tokens a day (likewise --tokens-per-week, --tokens-per-month)
  --soft rpm,tpd            these limits only warn (x-inferplane-ratelimit-warning) instead of
                            refusing with 429 (names: rpm tpm tpd tpw tpmo, or the flags' names)

The gateway holds every replica to the same counts (docs/keys.md, Limits); the tenant's own
limits (tenant.yaml spec.limits) cap all its keys together. "keys limit" changes a key's limits
later; "keys usage" shows the spend against each.`

func (f *limitFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	words := [limits.NumKinds]string{"requests a minute", "tokens a minute", "tokens a day", "tokens a week (from Monday)", "tokens a calendar month"}
	for k := range limits.NumKinds {
		fl.Int64Var(&f.values[k], limitFlagNames[k], 0, "limit the key to this many "+words[k]+" (0: none)")
	}
	fl.StringSliceVar(&f.soft, "soft", nil, "limits that only warn instead of refusing: rpm, tpm, tpd, tpw, tpmo (repeatable or comma-separated)")
}

// limitFlagsOf reads the limit flags of a command that registered them (the product API's form
// of keys create, which has the command's flags but not its limitFlags).
func limitFlagsOf(fs *pflag.FlagSet) limitFlags {
	var f limitFlags
	for k, name := range limitFlagNames {
		f.values[k], _ = fs.GetInt64(name)
	}
	f.soft, _ = fs.GetStringSlice("soft")
	return f
}

// spec is the limits the flags give (nil: none), or a usage error naming the flag.
func (f *limitFlags) spec() (*v1alpha1.RateLimits, error) {
	var set limits.Set
	for k := range limits.NumKinds {
		if v := f.values[k]; v < 0 {
			return nil, usageErr(fmt.Errorf("--%s %d: want a positive number (0: none)", limitFlagNames[k], v))
		} else {
			set[k].Value = v
		}
	}
	for _, s := range f.soft {
		k, ok := limitKind(s)
		if !ok {
			return nil, usageErr(fmt.Errorf("--soft %q: want one of rpm, tpm, tpd, tpw, tpmo", s))
		}
		if set[k].Value == 0 {
			return nil, usageErr(fmt.Errorf("--soft %s: the key has no %s limit (set --%s)", s, k, limitFlagNames[k]))
		}
		set[k].Soft = true
	}
	return set.Spec(), nil
}

func limitKind(s string) (limits.Kind, bool) {
	s = strings.TrimSpace(strings.TrimPrefix(s, "--"))
	for k := range limits.NumKinds {
		if s == k.Short() || s == k.String() || s == limitFlagNames[k] {
			return k, true
		}
	}
	return 0, false
}

// describeLimits says a key's limits in a line.
func describeLimits(r *v1alpha1.RateLimits) string {
	if set := limits.FromSpec(r); !set.Empty() {
		return set.String()
	}
	return "no limits of its own"
}

func newKeysLimitCmd() *cobra.Command {
	var (
		sf    storeFlags
		lf    limitFlags
		clear bool
	)
	cmd := &cobra.Command{
		Use:   "limit ID [--requests-per-minute N] [--tokens-per-minute N] [--tokens-per-day N] [--tokens-per-week N] [--tokens-per-month N] [--soft rpm,...] | --clear",
		Short: "Set or clear a key's own rate limits and token budgets",
		Long: `Replaces a key's limits with the ones given (the others are removed); --clear removes them
all, leaving only its tenant's. Every gateway replica applies the change as it reads the key
store (within a second); what the key spent in the current windows still counts.

A customer signed in to the product API (inferplane login) limits the keys of the context's
tenant: each limit at most the tenant's own of the same kind (spec.limits of its tenant.yaml),
which apply to every key whatever its own and which only the operator changes; a limit above it
is refused, naming the field and the tenant's value.

` + limitsHelp,
		Example: `  # 60 requests a minute and a budget of 1M tokens a month that only warns
  inferplane keys limit 3f9a0c1d2e4b5a69 --requests-per-minute 60 --tokens-per-month 1000000 --soft tpmo

  # Back to the tenant's limits only
  inferplane keys limit 3f9a0c1d2e4b5a69 --clear`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := limitRequest(args[0], &lf, clear)
			if err != nil {
				return err
			}
			id := args[0]
			store, _, err := sf.open(true)
			if err != nil {
				return err
			}
			r, err := store.SetLimits(cmd.Context(), id, spec)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "key %s (tenant %s): %s\n", r.ID, r.Tenant, describeLimits(r.Limits))
			return err
		},
	}
	sf.register(cmd)
	lf.register(cmd)
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the key's own limits")
	return cmd
}

// limitRequest checks keys limit's arguments: the key's id, and its new limits (nil with
// --clear), or a usage error.
func limitRequest(id string, lf *limitFlags, clear bool) (*v1alpha1.RateLimits, error) {
	if !keys.ValidID(id) {
		return nil, usageErr(fmt.Errorf("%q is not a key id (16 hex digits, as `keys list` shows)", id))
	}
	spec, err := lf.spec()
	if err != nil {
		return nil, err
	}
	if clear && spec != nil {
		return nil, usageErr(errors.New("--clear removes every limit: give it alone"))
	}
	if !clear && spec == nil {
		return nil, usageErr(errors.New("give at least one limit (--requests-per-minute, --tokens-per-day, ...) or --clear"))
	}
	return spec, nil
}

// fetchLimits reads the spend against limits from one server (the counts are shared by every
// replica, so one answers for all).
func fetchLimits(cmd *cobra.Command, server, tenant, key string) (limits.StatusReport, error) {
	rep, err := gateway.Client{BaseURL: server}.Limits(cmd.Context(), tenant, key)
	if err != nil {
		return rep, gatewayErr(err)
	}
	return rep, nil
}

func printLimits(w io.Writer, rep limits.StatusReport) error {
	if len(rep.Limits) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	if !rep.StoreUp {
		fmt.Fprintln(w, "(the limits store is unreachable: these are the counts the server knows)")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT OF\tLIMIT\tMODE\tUSED\tOF\tREMAINING\tRESETS")
	rows := slices.Clone(rep.Limits)
	for _, l := range rows {
		whose := "tenant " + l.Tenant
		if l.KeyID != "" {
			whose = "key " + l.KeyID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", whose, l.Limit, l.Mode, l.Used, l.Value, l.Remaining,
			l.ResetsAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
