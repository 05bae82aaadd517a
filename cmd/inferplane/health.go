package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newHealthCmd() *cobra.Command {
	return &cobra.Command{Use: "health", Short: "(not built yet)", Hidden: true}
}
