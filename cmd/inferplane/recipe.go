package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/fielderr"
)

func newRecipeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "recipe",
		Short: "Inspect vLLM recipes and the model masters derived from them",
		Long: `A vLLM recipe (models/<org>/<repo>.yaml in the upstream vllm-project/recipes layout) becomes a
ModelMaster by the upstream rules: variant x hardware x strategy x features. These commands
show the result for one model and one kind of node, exactly as generate derives it for a job.`,
		Example: `  inferplane recipe list
  inferplane recipe show Qwen/Qwen3-32B --node-type metal3.gpu-h100`,
	}
	cmd.AddCommand(newRecipeShowCmd(), newRecipeListCmd())
	return cmd
}

func newRecipeShowCmd() *cobra.Command {
	var (
		recipesDir, tenantsDir string
		variant, strategy      string
		nodeType, output       string
		kvOffload              string
		nodes                  int32
		features, modes        []string
	)
	cmd := &cobra.Command{
		Use:   "show <model-id>",
		Short: "Print the ModelMaster a recipe gives for a node type",
		Long: `show derives the ModelMaster of a recipe model for one node type and prints it. --node-type is
a NodeType name from the tenants folder (its GPU count and memory are used) or a hardware
profile of the recipes' taxonomy.yaml (h100, h200, b200, ...). The master's
perReplicaGPUCount is the gpuCount a job must ask for.`,
		Example: `  # Qwen3-32B on an H100 node: TP 1, hermes tool parser, qwen3 reasoning parser
  inferplane recipe show Qwen/Qwen3-32B --node-type h100

  # Kimi-K2 on the bundled H200 node type: two nodes of 8 GPUs
  inferplane recipe show moonshotai/Kimi-K2-Instruct --node-type metal3.gpu-h200

  # The FP8 checkpoint with reasoning off, as JSON
  inferplane recipe show Qwen/Qwen3-32B --variant fp8 --feature reasoning=off -o json

  # DeepSeek-V3.2 with data + expert parallelism over two H200 nodes, every node serving
  inferplane recipe show deepseek-ai/DeepSeek-V3.2 --strategy multi_node_dep --node-type h200

  # A pick-one feature's mode, and KV-cache offload to CPU memory
  inferplane recipe show deepseek-ai/DeepSeek-V4-Pro --variant fp8 --mode spec_decoding=mtp --node-type b200
  inferplane recipe show Qwen/Qwen3-32B --kv-offload simple`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRecipeModel,
		RunE: func(cmd *cobra.Command, args []string) error {
			toggles, err := parseFeatures(features)
			if err != nil {
				return usageErr(err)
			}
			picked, err := parseModes(modes)
			if err != nil {
				return usageErr(err)
			}
			book, err := loadBookFor(recipesDir, args[0])
			if err != nil {
				return err
			}
			printWarnings(cmd.ErrOrStderr(), recipesDir, book)
			hw, err := resolveHardware(book, nodeType, tenantsDir, cmd.Flags().Changed("tenants"))
			if err != nil {
				return err
			}
			m, err := book.Derive(recipe.Request{
				ModelID: args[0], Variant: variant, Strategy: strategy, Features: toggles, FeatureModes: picked,
				KVOffload: kvOffload, Hardware: hw, Nodes: nodes,
			})
			if fe, ok := err.(*field.Error); ok {
				return errors.New(fielderr.Describe(fe))
			} else if err != nil {
				return err
			}
			return printData(cmd.OutOrStdout(), output, m)
		},
	}
	f := cmd.Flags()
	f.StringVar(&variant, "variant", "", "recipe variant (default: the recipe's default)")
	f.StringVar(&strategy, "strategy", "", "recipe strategy (default: the one the rules pick)")
	f.StringVar(&nodeType, "node-type", "h100", "NodeType to derive for: a node type of the tenants folder, or a taxonomy hardware profile")
	_ = cmd.RegisterFlagCompletionFunc("node-type", completeNodeType)
	f.Int32Var(&nodes, "nodes", 0, "nodes per replica (default: as few as the model fits on)")
	f.StringArrayVar(&features, "feature", nil, "turn a recipe feature on or off: name=on|off (repeatable)")
	f.StringArrayVar(&modes, "mode", nil, "pick a pick-one feature's mode: feature=mode, e.g. spec_decoding=mtp (repeatable; turns the feature on)")
	f.StringVar(&kvOffload, "kv-offload", "", "a KV-cache offload option of the taxonomy (simple, offloading_cpu, offloading_fs)")
	f.StringVar(&recipesDir, "recipes", "recipes", usageRecipes)
	f.StringVar(&tenantsDir, "tenants", "tenants", usageTenants)
	registerOutput(cmd, &output, "yaml", "", "yaml", "json")
	return cmd
}

func newRecipeListCmd() *cobra.Command {
	var (
		recipesDir string
		warnings   bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the recipe models, their variants and strategies",
		Long: `list prints every recipe of the tree with its variants, the strategies inferplane renders for
it (recipe show accepts them; memory and per-hardware gates are checked there, for a node
type) and, under NOT RENDERED, the strategies it refuses on any hardware: pd_cluster, and
every strategy of a vllm-omni recipe. It reads only those parts of each recipe: generate and
validate check the whole tree.

--warnings lists instead what loads but looks wrong in the tree (a recipe whose model.model_id
differs from its path, as two upstream recipes do on purpose). generate and jobs create say
so only for the recipes their jobs use.`,
		Example: `  inferplane recipe list --recipes ./recipes
  inferplane recipe list --warnings`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkRecipesDir(recipesDir); err != nil {
				return err
			}
			if warnings {
				book, err := loadBook(recipesDir)
				if err != nil {
					return err
				}
				for _, w := range book.Warnings() {
					fmt.Fprintln(cmd.OutOrStdout(), w)
				}
				return nil
			}
			// A one-shot command (see loadBookFor).
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			listings, err := recipe.List(os.DirFS(recipesDir))
			if err != nil {
				return fmt.Errorf("%s: %w", recipesDir, err)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MODEL\tVARIANTS\tSTRATEGIES\tNOT RENDERED")
			for _, l := range listings {
				notRendered := orDash(l.Refused)
				if l.Omni {
					notRendered = "all (vllm-omni)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.ID, strings.Join(l.Variants, ","), orDash(l.Rendered), notRendered)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&recipesDir, "recipes", "recipes", usageRecipes)
	cmd.Flags().BoolVar(&warnings, "warnings", false, "list what loads but looks wrong in the recipes tree, instead of the recipes")
	return cmd
}

func loadBook(dir string) (*recipe.Book, error) { return loadBookFor(dir, "") }

// loadBookFor loads the recipes tree, or only what deriving modelID needs (recipe.LoadFor).
func loadBookFor(dir, modelID string) (*recipe.Book, error) {
	if err := checkRecipesDir(dir); err != nil {
		return nil, err
	}
	// A one-shot command: collecting garbage while the corpus is being parsed only costs time
	// (docs/recipes.md has the measurement).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	load := recipe.Load
	if modelID != "" {
		load = func(fsys fs.FS) (*recipe.Book, error) { return recipe.LoadFor(fsys, modelID) }
	}
	book, err := load(os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return book, nil
}

func checkRecipesDir(dir string) error {
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return fmt.Errorf("%s: not a folder; expected the vLLM recipes tree (models/, strategies/, taxonomy.yaml); pass --recipes", dir)
	}
	return nil
}

func orDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// resolveHardware reads --node-type: a NodeType of the tenants folder, else a taxonomy profile.
func resolveHardware(book *recipe.Book, name, tenantsDir string, tenantsGiven bool) (recipe.Hardware, error) {
	var nts []inputs.NodeType
	var fsys fs.FS
	if info, err := os.Stat(tenantsDir); err == nil && info.IsDir() {
		fsys = os.DirFS(tenantsDir)
	} else if tenantsGiven {
		return recipe.Hardware{}, fmt.Errorf("--tenants %s: not a folder", tenantsDir)
	}
	if fsys != nil {
		var err error
		if nts, err = inputs.LoadNodeTypes(fsys, tenantsDir); err != nil {
			return recipe.Hardware{}, err
		}
	}
	var names []string
	for _, nt := range nts {
		if nt.Object.Name == name {
			if nt.Object.Spec.HardwareProfile == "" {
				return recipe.Hardware{}, fmt.Errorf("--node-type %s: %s sets no spec.hardwareProfile, which recipe derivation needs", name, nt.File)
			}
			return recipe.HardwareOf(&nt.Object.Spec), nil
		}
		names = append(names, nt.Object.Name)
	}
	if tax := book.Taxonomy(); tax != nil {
		if _, ok := tax.HardwareProfiles.Get(name); ok {
			return recipe.Hardware{Profile: name}, nil
		}
		return recipe.Hardware{}, fmt.Errorf("--node-type %q: expected a node type (%s) or a taxonomy hardware profile (%s)",
			name, orNone(names), strings.Join(tax.HardwareProfiles.Keys, ", "))
	}
	return recipe.Hardware{Profile: name}, nil
}

func orNone(s []string) string { return fielderr.List(slices.Sorted(slices.Values(s))) }

func parseModes(specs []string) (map[string]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, s := range specs {
		name, mode, ok := strings.Cut(s, "=")
		if !ok || name == "" || mode == "" {
			return nil, fmt.Errorf("--mode %q: expected feature=mode, e.g. spec_decoding=mtp", s)
		}
		out[name] = mode
	}
	return out, nil
}

func parseFeatures(specs []string) (map[string]bool, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := map[string]bool{}
	for _, s := range specs {
		name, val, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--feature %q: expected name=on or name=off", s)
		}
		switch strings.ToLower(val) {
		case "on", "true", "yes", "1":
			out[name] = true
		case "off", "false", "no", "0":
			out[name] = false
		default:
			return nil, fmt.Errorf("--feature %q: expected name=on or name=off", s)
		}
	}
	return out, nil
}
