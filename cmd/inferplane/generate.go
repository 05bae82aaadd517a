package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newGenerateCmd() *cobra.Command {
	return &cobra.Command{Use: "generate", Short: "(not built yet)", Hidden: true}
}
