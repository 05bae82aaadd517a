package main

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flagMeanings is the one meaning of each flag name that several commands share (docs/cli.md):
// every command's usage text of that flag starts so. A flag shared by several commands that is
// not listed here must have the same usage text everywhere.
var flagMeanings = map[string]string{
	"output":             "output format: ",
	"grpc-address":       "address of ",
	"admin-address":      "address of ",
	"file":               "write to this file instead of standard output",
	"server":             "the gateway: base URL of the xDS server's admin address",
	"namespace":          "Kubernetes namespace of ",
	"kubeconfig":         "kubeconfig file",
	"context":            "kubeconfig context",
	"domain":             "endpoints are https://<job>.<tenant>.<domain>",
	"tenant":             "tenant ",
	"force":              "do it although a check refuses: ",
	"limits-tenants":     limitsTenantsUsage,
	"dry-run":            "write nothing; show ",
	"name":               "name of ",
	"replicas":           "number of ",
	"image":              "container image ",
	"model":              "the model",
	"node-type":          "NodeType",
	"storage-class":      "storage class of the ",
	"log-level":          "log level: ",
	"shutdown-timeout":   "how long in-flight ",
	"argocd-namespace":   "namespace of Argo CD's cluster Secrets",
	"vcluster-namespace": "host namespace ",
	"vcluster-selector":  "label selector of the vCluster kubeconfig Secrets",
	"endpoint":           "job endpoint",
	"console-url":        "where browsers reach the console",
	"console-gateway":    "where the playground sends the endpoints' requests",
	"oidc-issuer":        "the OIDC provider's issuer URL",
	"oidc-client-id":     "the API's OIDC client id",
	"admin-group":        "a group of the operator",
	"inputs-repo":        "the inputs' git repository",
	"inputs-branch":      "the inputs' branch",
	"keys-file":          "API key store file (bbolt)",
	"gateway-name":       "name of the gateway: the prefix of its objects",
	"gateway-replicas":   "number of xDS servers",
	"replica":            "only this replica",
	"since":              "from this long ago",
}

// commands is every command of the tree a user runs: not help, completion or hidden ones.
func commands(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		out = append(out, c)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return out
}

// TestCLIConventions walks every command's --help and holds it to the conventions, so a new
// command cannot drift: examples in --help, -o only ever an output format, a job always
// <tenant>/<job>, and each flag name meaning one thing.
func TestCLIConventions(t *testing.T) {
	root := newRootCmd()
	uses := map[string][]string{} // flag name -> "command: usage"
	for _, c := range commands(root) {
		path := c.CommandPath()
		help, _, err := execCLI(context.Background(), append(strings.Fields(path)[1:], "--help")...)
		require.NoError(t, err, path)
		assert.Contains(t, help, "Examples:", "%s --help shows no example", path)
		assert.NotEmpty(t, c.Short, path)
		assert.NotRegexp(t, `<tenant> <job>`, c.Use+c.Example, "%s: a job is <tenant>/<job>", path)
		checkExampleFlags(t, root, path, c.Example)
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			uses[f.Name] = append(uses[f.Name], path+": "+f.Usage)
			if f.Shorthand == "o" || f.Name == "output" {
				assert.Equal(t, "output", f.Name, "%s: -o is --output", path)
				assert.Equal(t, "o", f.Shorthand, "%s: --output is -o", path)
				formats := f.Annotations[formatsAnnotation]
				assert.NotEmpty(t, formats, "%s: -o is registered with registerOutput (its formats)", path)
				for _, v := range formats {
					assert.Contains(t, outputFormats, v, "%s: -o %s is not an output format", path, v)
				}
				if f.DefValue != "" {
					assert.Contains(t, formats, f.DefValue, path)
				}
			}
		})
	}
	names := make([]string, 0, len(uses))
	for n := range uses {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		all := uses[name]
		if prefix, ok := flagMeanings[name]; ok {
			for _, u := range all {
				_, usage, _ := strings.Cut(u, ": ")
				assert.True(t, strings.HasPrefix(usage, prefix), "--%s means %q everywhere; %s", name, prefix, u)
			}
			continue
		}
		if len(all) < 2 {
			continue
		}
		var texts []string
		for _, u := range all {
			_, usage, _ := strings.Cut(u, ": ")
			texts = append(texts, usage)
		}
		assert.Len(t, slices.Compact(slices.Sorted(slices.Values(texts))), 1,
			"--%s is in several commands with different usage texts; give them one (or list its meaning in flagMeanings):\n%s", name, strings.Join(all, "\n"))
	}
}

// Every usage error exits 2, cobra's own included, so a script can tell a typo from an outage.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "detail", "acme/chat", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"jobs", "detail"}, "accepts 1 arg(s), received 0"},
		{[]string{"jobs", "detail", "acme", "chat"}, `did you mean acme/chat?`},
		{[]string{"jobs", "create", "acme", "chat", "--model", "Qwen/Qwen3-32B"}, `did you mean acme/chat?`},
		{[]string{"jobs", "restart", "chat.acme"}, `"chat.acme": expected <tenant>/<job>; did you mean acme/chat?`},
		{[]string{"models", "add"}, `required flag(s) "from-recipe" not set`},
		{[]string{"jobs", "frob"}, `unknown command "frob" for "inferplane jobs"`},
		{[]string{"jbos"}, `unknown command "jbos" for "inferplane"`},
		{[]string{"keys", "list", "-o", "wide"}, `-o "wide": expected table, json, yaml or name`},
		{[]string{"gateway", "manifests", "--domain", "d", "-o", "gw.yaml"}, "write to a file with --file FILE"},
		{[]string{"health", "--tenant"}, "flag needs an argument"},
		{[]string{"usage", "--group-by", "vm"}, `--group-by "vm": expected one of job, model, key, day, nodeType, tier`},
		{[]string{"usage", "-o", "yaml"}, `-o "yaml": expected table, json or csv`},
	} {
		_, _, err := execCLI(context.Background(), tc.args...)
		require.Error(t, err, "%v", tc.args)
		assert.Equal(t, 2, exitCode(err), "%v: %v", tc.args, err)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
	out, _, err := execCLI(context.Background(), "jobs")
	require.NoError(t, err, "a command group alone prints its help")
	assert.Contains(t, out, "Available Commands:")
}

// Tenants, jobs and models complete from the tenants and recipes folders (cobra's __complete,
// which the shell completion scripts call).
func TestNameCompletion(t *testing.T) {
	complete := func(args ...string) []string {
		t.Helper()
		out, _, err := execCLI(context.Background(), append([]string{cobra.ShellCompRequestCmd}, args...)...)
		require.NoError(t, err)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") && !strings.HasPrefix(l, "-") { // the directive, and the flags cobra offers too
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		return got
	}
	in := []string{"--tenants", "../../tenants", "--recipes", "../../recipes"}
	assert.Equal(t, []string{"acme/mistral-small", "acme/qwen3-32b", "acme/transcribe"}, complete(append([]string{"jobs", "detail"}, append(in, "acme/")...)...))
	assert.Contains(t, complete(append([]string{"jobs", "delete"}, append(in, "")...)...), "globex/kimi-k2")
	assert.Equal(t, []string{"acme/", "globex/", "initech/", "platform/"}, complete(append([]string{"jobs", "create"}, append(in, "")...)...))
	assert.Equal(t, []string{"acme", "globex", "initech", "platform"}, complete("keys", "create", "--tenants", "../../tenants", "--tenant", ""))
	assert.Equal(t, []string{"mistral-small", "qwen3-32b", "transcribe"}, complete("keys", "create", "--tenant", "acme", "--tenants", "../../tenants", "--endpoint", ""))
	assert.Contains(t, complete(append([]string{"recipe", "show"}, append(in, "Qwen/Qwen3-3")...)...), "Qwen/Qwen3-32B")
	models := complete(append([]string{"jobs", "create", "acme/chat"}, append(in, "--model", "")...)...)
	assert.Contains(t, models, "Qwen/Qwen3-32B", "recipe models")
	assert.Contains(t, models, "mistral-small-24b", "hand-written masters")
	assert.Contains(t, complete(append([]string{"jobs", "create", "acme/chat"}, append(in, "--node-type", "")...)...), "metal3.gpu-h100")
}

// checkExampleFlags holds the inferplane command lines of an Example to the flags their
// commands have: none unknown, none deprecated (an example shows the current way).
func checkExampleFlags(t *testing.T, root *cobra.Command, path, example string) {
	t.Helper()
	text := strings.ReplaceAll(example, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		// Each command of the line: a pipe's, a $(...)'s.
		for _, part := range strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune("|;()$`", r) }) {
			_, cmdline, ok := strings.Cut(part, "inferplane ")
			if ok {
				checkExampleLine(t, root, path, strings.TrimSpace(line), cmdline)
			}
		}
	}
}

func checkExampleLine(t *testing.T, root *cobra.Command, path, line, cmdline string) {
	t.Helper()
	words := strings.Fields(cmdline)
	c, _, err := root.Find(words)
	if !assert.NoError(t, err, "%s: example %q", path, line) {
		return
	}
	_, endsAtArg := c.Annotations[flagsEndAtFirstArg]
	skipValue := false
	for _, w := range words[len(strings.Fields(c.CommandPath()))-1:] {
		name, ok := strings.CutPrefix(w, "--")
		if !ok || name == "" {
			if !skipValue && endsAtArg && !strings.HasPrefix(w, "-") {
				break // the command's own flags end here; the words after are its program's
			}
			skipValue = false
			continue
		}
		name, value, hasValue := strings.Cut(name, "=")
		f := c.Flags().Lookup(name)
		if f == nil {
			f = c.InheritedFlags().Lookup(name)
		}
		if assert.NotNil(t, f, "%s: example %q: %s has no flag --%s", path, line, c.CommandPath(), name) {
			assert.Empty(t, f.Deprecated, "%s: example %q uses the deprecated --%s", path, line, name)
			skipValue = !hasValue && f.NoOptDefVal == "" && value == ""
		}
	}
}
