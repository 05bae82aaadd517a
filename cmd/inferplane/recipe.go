package main

import "github.com/spf13/cobra"

// PLACEHOLDER: replaced by the issue that builds this command.
func newRecipeCmd() *cobra.Command {
	return &cobra.Command{Use: "recipe", Short: "(not built yet)", Hidden: true}
}
