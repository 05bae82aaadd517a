package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newValidateCmd() *cobra.Command {
	return &cobra.Command{Use: "validate", Short: "(not built yet)", Hidden: true}
}
