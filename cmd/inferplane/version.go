package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/internal/version"
)

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version [-o table|json|yaml]",
		Short: "Print this build's version, commit, Go version and the image its manifests run",
		Long: `version prints which build of inferplane this is: its version (a release vX.Y.Z, or
dev-<commit> for a development build, with -dirty when the tree had uncommitted changes), the
commit and its time, the Go toolchain and platform, and the image that gateway manifests and
webhook manifests run by default (` + version.ImageRepository + `:<version>, what make image
builds from the same tree), and the guest disk that generated VMs boot by default
(` + version.GuestImageRepository + `:<version>, what make guest-image builds).

make build and make image stamp these with the linker; a plain go build or go run takes them
from what Go records in the binary (the module version and the git revision). "stamped by"
says which.`,
		Example: `  inferplane version
  inferplane version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeVersion(cmd, version.Get(), output)
		},
	}
	registerOutput(cmd, &output, "table", "", "table", "json", "yaml")
	return cmd
}

func writeVersion(cmd *cobra.Command, in version.Info, output string) error {
	w := cmd.OutOrStdout()
	if output != "table" {
		return printData(w, output, in)
	}
	commit := in.Commit
	switch {
	case commit == "":
		commit = "unknown"
	case in.Modified:
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(w, "Version:     %s\n", in.Version)
	fmt.Fprintf(w, "Commit:      %s\n", commit)
	if in.CommitDate != "" {
		fmt.Fprintf(w, "Commit date: %s\n", in.CommitDate)
	}
	fmt.Fprintf(w, "Go:          %s %s\n", in.GoVersion, in.Platform)
	fmt.Fprintf(w, "Image:       %s\n", in.Image)
	fmt.Fprintf(w, "Guest image: %s\n", in.GuestImage)
	_, err := fmt.Fprintf(w, "Stamped by:  %s\n", in.StampedBy)
	return err
}
