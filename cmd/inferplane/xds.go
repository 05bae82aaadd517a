package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newXDSCmd() *cobra.Command {
	return &cobra.Command{Use: "xds", Short: "(not built yet)", Hidden: true}
}
