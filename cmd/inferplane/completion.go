package main

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/generator/inputs"
)

// Name completion (cobra's __complete, which `inferplane completion bash|zsh|fish` scripts
// call): tenants, jobs, models and node types, read from the folders the command's own
// --tenants and --recipes name. Only file and folder names are read, so it stays instant.

// folderFlag is the value of a command's folder flag (--tenants, --recipes), or its default.
func folderFlag(cmd *cobra.Command, name string) string {
	if f := cmd.Flags().Lookup(name); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return name
}

// yamlNames are the names of the YAML files in dir, without the extension, sorted.
func yamlNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			out = append(out, strings.TrimSuffix(strings.TrimSuffix(n, ".yaml"), ".yml"))
		}
	}
	slices.Sort(out)
	return out
}

// tenantNames are the tenants of the tenants folder: the folders with a tenant.yaml.
func tenantNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), inputs.TenantFile)); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

func completeTenants(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	return withPrefix(tenantNames(folderFlag(cmd, "tenants")), prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeEndpoints completes --endpoint with the jobs of the tenant --tenant names.
func completeEndpoints(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	tenant, _ := cmd.Flags().GetString("tenant")
	if tenant == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(yamlNames(filepath.Join(folderFlag(cmd, "tenants"), tenant, inputs.JobsDir)), prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeJobs completes a <tenant>/<job> argument with the jobs of the tenants folder.
func completeJobs(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	dir := folderFlag(cmd, "tenants")
	var out []string
	for _, t := range tenantNames(dir) {
		for _, j := range yamlNames(filepath.Join(dir, t, inputs.JobsDir)) {
			out = append(out, t+"/"+j)
		}
	}
	return withPrefix(out, prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeNewJob completes the <tenant>/ of a job to create.
func completeNewJob(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, t := range tenantNames(folderFlag(cmd, "tenants")) {
		out = append(out, t+"/")
	}
	return withPrefix(out, prefix), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// recipeModels are the model ids of the recipes folder: models/<org>/<repo>.yaml.
func recipeModels(dir string) []string {
	orgs, _ := os.ReadDir(filepath.Join(dir, "models"))
	var out []string
	for _, org := range orgs {
		if org.IsDir() {
			for _, repo := range yamlNames(filepath.Join(dir, "models", org.Name())) {
				out = append(out, path.Join(org.Name(), repo))
			}
		}
	}
	return out
}

// completeRecipeModel completes a recipe model id (recipe show, models add --from-recipe).
func completeRecipeModel(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if cmd.Flags().Lookup("from-recipe") == nil && len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(recipeModels(folderFlag(cmd, "recipes")), prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeModel completes a job's --model: recipe model ids and hand-written masters.
func completeModel(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	models := recipeModels(folderFlag(cmd, "recipes"))
	models = append(models, yamlNames(filepath.Join(folderFlag(cmd, "tenants"), inputs.MastersDir))...)
	return withPrefix(models, prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeNodeType completes --node-type with the node types of the tenants folder.
func completeNodeType(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	return withPrefix(yamlNames(filepath.Join(folderFlag(cmd, "tenants"), inputs.NodeTypesDir)), prefix), cobra.ShellCompDirectiveNoFileComp
}

// withPrefix keeps the names that start with what was typed.
func withPrefix(names []string, prefix string) []string {
	return slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, prefix) })
}
