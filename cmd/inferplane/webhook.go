package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newWebhookCmd() *cobra.Command {
	return &cobra.Command{Use: "webhook", Short: "(not built yet)", Hidden: true}
}
