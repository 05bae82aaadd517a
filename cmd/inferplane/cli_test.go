package main

import (
	"bytes"
	"context"
)

// execCLI runs the inferplane command line in-process, as main does, and returns what it wrote
// to stdout and stderr apart (some commands print data on stdout and notices on stderr).
func execCLI(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}
