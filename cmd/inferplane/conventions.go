package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/internal/suggest"
)

// The CLI's conventions (docs/cli.md), applied to every command by applyConventions and held
// by TestCLIConventions over every command's --help:
//
//   - exit status 2 for every usage error: a flag cobra cannot parse or does not know, a wrong
//     number of arguments, a required flag missing, an unknown subcommand, a bad flag value;
//   - -o/--output is always an output format, one of table, json, yaml and name (each command
//     accepts those it can print); a file to write is --file, a folder --out-dir;
//   - a job is <tenant>/<job>;
//   - a flag name means one thing in every command that has it (flagMeanings in the test).

// flagsEndAtFirstArg marks a command whose flags end at its first argument: the words after it
// are another program's (agent IMAGE ARG...), as docker run's are.
const flagsEndAtFirstArg = "inferplane.io/flags-end-at-first-arg"

// outputFormats are the values -o may take, in any command.
var outputFormats = []string{"table", "json", "yaml", "name", "csv"}

// formatsAnnotation holds, on a command's output flag, the formats that command accepts.
const formatsAnnotation = "inferplane.io/formats"

// registerOutput adds -o/--output to cmd: an output format among formats (a subset of
// outputFormats), def when not given; def "" means the command's own human form, described
// by human (e.g. "the key alone"). applyConventions refuses any other value as a usage error.
func registerOutput(cmd *cobra.Command, p *string, def, human string, formats ...string) {
	usage := "output format: " + orList(formats)
	if def == "" && human != "" {
		usage += " (default: " + human + ")"
	}
	cmd.Flags().StringVarP(p, "output", "o", def, usage)
	_ = cmd.Flags().SetAnnotation("output", formatsAnnotation, formats)
}

// checkOutput refuses an -o value the command does not print, with a hint for a file name.
func checkOutput(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("output")
	if f == nil {
		return nil
	}
	formats := f.Annotations[formatsAnnotation]
	v := f.Value.String()
	if formats == nil || slices.Contains(formats, v) || (v == "" && f.DefValue == "") {
		return nil
	}
	hint := ""
	if strings.ContainsAny(v, "./") || v == "-" {
		hint = "; -o is an output format in every inferplane command: redirect standard output to write a file"
	}
	return fmt.Errorf("-o %q: expected %s%s", v, orList(formats), hint)
}

// printData writes v as indented JSON or as YAML (format "json" or "yaml"); the field names are
// the JSON tags, camelCase everywhere.
func printData(w io.Writer, format string, v any) error {
	if format == "yaml" {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // read by people and jq, not embedded in HTML: "<domain>", not "\u003cdomain\u003e"
	return enc.Encode(v)
}

// applyConventions makes every command of the tree under root follow the conventions above
// that cobra does not apply itself. Called once the tree is complete.
func applyConventions(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr(fmt.Errorf("%w%s\nSee '%s --help'.", err, flagHint(c, err), c.CommandPath()))
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = cobra.ArbitraryArgs
			c.RunE = runGroup
		}
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					var es *exitStatus
					if errors.As(err, &es) {
						return err
					}
					return usageErr(fmt.Errorf("%w\nSee '%s --help'.", err, cmd.CommandPath()))
				}
				return nil
			}
		}
		pre := c.PreRunE
		c.PreRunE = func(cmd *cobra.Command, a []string) error {
			// cobra checks required flags only after PreRunE, and words them as any error.
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return usageErr(fmt.Errorf("%w\nSee '%s --help'.", err, cmd.CommandPath()))
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return usageErr(err)
			}
			if err := checkOutput(cmd); err != nil {
				return usageErr(err)
			}
			if pre != nil {
				return pre(cmd, a)
			}
			return nil
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// runGroup is what a command made only of subcommands does: print its help, or refuse a
// subcommand it does not have (cobra would print the help and exit 0).
func runGroup(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	var names []string
	for _, s := range cmd.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return usageErr(fmt.Errorf("unknown command %q for %q (commands: %s)%s\nSee '%s --help'.", args[0], cmd.CommandPath(),
		strings.Join(names, ", "), suggest.DidYouMean(suggest.Close(args[0], names)), cmd.CommandPath()))
}

// flagHint adds to a flag error what the conventions changed: -o is a format, files are --file.
func flagHint(c *cobra.Command, err error) string {
	msg := err.Error()
	if strings.Contains(msg, "'o' in -o") || strings.Contains(msg, "--output") {
		if c.Flags().Lookup("file") != nil {
			return " (-o is an output format in every inferplane command: write to a file with --file FILE)"
		}
		return " (-o is an output format in every inferplane command)"
	}
	return ""
}

// deprecatedAlias registers old as a hidden alias of the flag new, bound to the same value;
// using it works and prints that new replaces it.
func deprecatedAlias(fs *pflag.FlagSet, old, new string) {
	f := fs.Lookup(new)
	alias := *f
	alias.Name, alias.Shorthand = old, ""
	alias.Annotations = nil
	fs.AddFlag(&alias)
	_ = fs.MarkDeprecated(old, "use --"+new)
}

// orList words a list for a message: "a", "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
