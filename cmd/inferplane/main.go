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
	"syscall"

	"github.com/spf13/cobra"
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
	)
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

// usageErr is a command used wrongly (a bad flag value, a missing argument): exit status 2.
func usageErr(err error) error { return &exitStatus{code: 2, err: err} }

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
