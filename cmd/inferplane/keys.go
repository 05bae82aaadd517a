package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newKeysCmd() *cobra.Command {
	return &cobra.Command{Use: "keys", Short: "(not built yet)", Hidden: true}
}
