package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"testing/fstest"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/fileutil"
	"github.com/inferplane/inferplane/lifecycle/jobfile"
)

func newModelsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "Write model masters an operator can pin and edit",
		Long: `models writes hand-written ModelMasters (tenants/masters/<name>.yaml): the master a recipe
derives, frozen so that recipe updates no longer change it, with its image pinned.`,
		Example: `  inferplane models add --from-recipe Qwen/Qwen3-32B --node-type metal3.gpu-h100 \
      --image vllm/vllm-openai:v0.10.2 --file tenants/masters/qwen3-32b-h100.yaml`,
	}
	cmd.AddCommand(newModelsAddCmd())
	return cmd
}

// modelsAddFlags are the flags of models add.
type modelsAddFlags struct {
	from, recipesDir, tenantsDir string
	variant, strategy, nodeType  string
	name, image, digest, out     string
	features                     []string
	force                        bool
}

func newModelsAddCmd() *cobra.Command {
	var f modelsAddFlags
	cmd := &cobra.Command{
		Use:   "add --from-recipe <model-id> [--variant V] [--node-type T] [--file FILE]",
		Short: "Write the master a recipe derives as a ModelMaster file, to pin and edit",
		Long: `add derives the ModelMaster of a recipe model for a node type, exactly as generate derives
it for a job, and writes it as a hand-written master (tenants/masters/<name>.yaml): jobs then
name it in spec.model and get it as written, whatever later recipe updates change.

Pin the runtime image there: a recipe's default image, vllm/vllm-openai:latest, is a tag
that moves to each new vLLM release. --image sets a version tag, --image-digest the digest
of one build (the guest then runs <image>@<digest>). The file is checked by the rules every
hand-written master meets before it is written, to --file (never over an existing file unless
--force) or standard output.`,
		Example: `  # Qwen3-32B for the bundled H100 node type, pinned to a vLLM release
  inferplane models add --from-recipe Qwen/Qwen3-32B --node-type metal3.gpu-h100 \
      --name qwen3-32b-pinned --image vllm/vllm-openai:v0.10.2 --file tenants/masters/qwen3-32b-pinned.yaml

  # Pinned to one build by digest (docker buildx imagetools inspect vllm/vllm-openai:v0.10.2)
  inferplane models add --from-recipe Qwen/Qwen3-32B --node-type metal3.gpu-h100 \
      --image vllm/vllm-openai:v0.10.2 --image-digest sha256:<64 hex> --file tenants/masters/qwen3-32b.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runModelsAdd(cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from-recipe", "", "recipe model id, e.g. Qwen/Qwen3-32B (required)")
	_ = cmd.RegisterFlagCompletionFunc("from-recipe", completeRecipeModel)
	fl.StringVar(&f.variant, "variant", "", "recipe variant (default: the recipe's default)")
	fl.StringVar(&f.strategy, "strategy", "", "recipe strategy (default: the one the rules pick)")
	fl.StringVar(&f.nodeType, "node-type", "h100", "NodeType to derive for: a node type of the tenants folder, or a taxonomy hardware profile")
	_ = cmd.RegisterFlagCompletionFunc("node-type", completeNodeType)
	fl.StringArrayVar(&f.features, "feature", nil, "turn a recipe feature on or off: name=on|off (repeatable)")
	fl.StringVar(&f.name, "name", "", "name of the master (default: the derived one, e.g. qwen3-32b-h100)")
	fl.StringVar(&f.image, "image", "", "container image of the model server, to pin, e.g. vllm/vllm-openai:v0.10.2 (default: the recipe's)")
	fl.StringVar(&f.digest, "image-digest", "", "pin the image to one build: sha256:<64 hex>")
	fl.StringVar(&f.out, "file", "", "write to this file instead of standard output (a new .yaml file, e.g. in tenants/masters/)")
	fl.BoolVar(&f.force, "force", false, "do it although a check refuses: overwrite an existing --file")
	fl.StringVar(&f.recipesDir, "recipes", "recipes", usageRecipes)
	fl.StringVar(&f.tenantsDir, "tenants", "tenants", usageTenants)
	_ = cmd.MarkFlagRequired("from-recipe")
	return cmd
}

func runModelsAdd(cmd *cobra.Command, f *modelsAddFlags) error {
	toggles, err := parseFeatures(f.features)
	if err != nil {
		return usageErr(err)
	}
	book, err := loadBook(f.recipesDir)
	if err != nil {
		return err
	}
	hw, err := resolveHardware(book, f.nodeType, f.tenantsDir, cmd.Flags().Changed("tenants"))
	if err != nil {
		return err
	}
	m, err := book.Derive(recipe.Request{ModelID: f.from, Variant: f.variant, Strategy: f.strategy, Features: toggles, Hardware: hw})
	if err != nil {
		return err
	}
	m.Name = cmp.Or(f.name, m.Name)
	m.Spec.Image = cmp.Or(f.image, m.Spec.Image)
	m.Spec.ImageDigest = f.digest
	data, err := masterFile(m, fmt.Sprintf("inferplane models add --from-recipe %s --node-type %s", f.from, f.nodeType))
	if err != nil {
		return err
	}
	if err := checkMaster(m.Name, data); err != nil {
		return err
	}
	if !imagePinned(m.Spec.Image) && f.digest == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: image %s is a tag that moves: pin it with --image <repo>:<version> or --image-digest before production\n", m.Spec.Image)
	}
	return writeMaster(cmd, f.out, m.Name, data, f.force)
}

// masterFile is the master as an operator would write it.
func masterFile(m *v1alpha1.ModelMaster, how string) ([]byte, error) {
	return jobfile.EncodeInput(v1alpha1.KindModelMaster, m.Name, m.Spec, "# Derived by `"+how+"`.\n"+
		"# A hand-written master from here on: jobs naming it get it as written. Pin spec.image\n"+
		"# (a version tag) or spec.imageDigest before production.\n")
}

// checkMaster holds the file to the rules of tenants/masters/: strict decoding, the field
// checks, and the plan's policy checks.
func checkMaster(name string, data []byte) error {
	tree := fstest.MapFS{path.Join(inputs.MastersDir, name+".yaml"): {Data: data}}
	in, err := inputs.Load(tree, "(the master)")
	if err == nil {
		_, err = plan.Build(in, nil, nil)
	}
	if err != nil {
		return fmt.Errorf("the master would not be accepted: %w", err)
	}
	return nil
}

func writeMaster(cmd *cobra.Command, out, name string, data []byte, force bool) error {
	if out == "" || out == "-" {
		_, err := cmd.OutOrStdout().Write(data)
		return err
	}
	if !strings.HasSuffix(out, ".yaml") && !strings.HasSuffix(out, ".yml") {
		return usageErr(fmt.Errorf("--file %s: expected a .yaml file (the generator reads only YAML files in masters/)", out))
	}
	write := fileutil.WriteNew
	if force {
		write = os.WriteFile
	}
	err := write(out, data, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: pass --force to overwrite it", out)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "wrote %s; jobs run this master with spec.model: %s (inferplane jobs create ... --model %s)\n", out, name, name)
	return err
}
