// Command inferplane is the control plane for managed LLM inference on Kubernetes: it renders
// tenants' GitOps state from vLLM recipes and job specs, guards clusters with an admission
// webhook, and feeds Envoy the healthy replicas of every endpoint.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/internal/fielderr"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "inferplane:", err)
		os.Exit(exitCode(err))
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "inferplane",
		Short: "Control plane for managed LLM inference on Kubernetes",
		Long: `inferplane turns vLLM recipes and tenants' inference jobs into GitOps state (vCluster
tenant clusters, Argo CD applications, KubeVirt VMs on passed-through GPUs), guards what Argo CD
syncs with an admission webhook, and routes customers' traffic through Envoy to healthy replicas.`,
		Example: `  inferplane generate                                   # render the bundled examples into ./out
  inferplane jobs create acme/chat --model Qwen/Qwen3-32B
  inferplane jobs detail acme/chat --wait
  source <(inferplane completion bash)                  # tenant, job and model names complete`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newGenerateCmd(),
		newRecipeCmd(),
		newValidateCmd(),
		newWebhookCmd(),
		newXDSCmd(),
		newGatewayCmd(),
		newKeysCmd(),
		newHealthCmd(),
		newJobsCmd(),
		newChatCmd(),
		newTranscribeCmd(),
		newModelsCmd(),
		newVersionCmd(),
		newAPICmd(),
		newLoginCmd(),
		newLogoutCmd(),
		newConfigCmd(),
		newAgentCmd(),
		newTenantsCmd(),
		newMeterCmd(),
		newUsageCmd(),
	)
	wireAPI(root)
	applyConventions(root)
	return root
}

// exitStatus lets a command choose its exit code (validate exits 1 on a denial, 2 on bad
// usage or input) while still returning an error for the message.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string { return e.err.Error() }
func (e *exitStatus) Unwrap() error { return e.err }

// usageErr is a command used wrongly (a bad flag value, a missing argument): exit status 2,
// for every command (docs/cli.md).
func usageErr(err error) error { return &exitStatus{code: 2, err: err} }

// flagErrors words field errors of what flags set as errors of those flags (`--tenant "x":
// <what is wrong>`), each followed by hint: flags maps a field path to its flag, and a path it
// does not list is the flag of that name (tenant: --tenant).
func flagErrors(errs field.ErrorList, flags map[string]string, hint string) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		flag := flags[e.Field]
		if flag == "" {
			flag = "--" + e.Field
		}
		switch v := fielderr.Value(e); {
		case e.Type == field.ErrorTypeRequired:
			flag += " is required"
		case v != "":
			flag += " " + v
		}
		msgs[i] = flag + ": " + e.Detail + hint
	}
	return errors.New(strings.Join(msgs, "; "))
}

// exitCode is the process's exit status for a command's error: 0 for none, the status an
// exitStatus carries (wrapped or not), else 1.
func exitCode(err error) int {
	var es *exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &es):
		return es.code
	}
	return 1
}
