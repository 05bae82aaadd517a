// Package recipe reads vLLM recipes in the upstream vllm-project/recipes layout and derives
// model masters from them with the upstream synthesis rules (variant x hardware x strategy x
// features). It is pure: it reads through an fs.FS and touches nothing else.
package recipe

import (
	"io/fs"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Book is a parsed recipes tree: models/<org>/<repo>.yaml, strategies/*.yaml, taxonomy.yaml.
type Book struct {
	// PLACEHOLDER fields: built by the recipe helper.
}

// Load parses a recipes tree rooted at fsys. Errors name the file and the field.
func Load(fsys fs.FS) (*Book, error) {
	panic("PLACEHOLDER: built by the recipe helper")
}

// Hardware is what the derivation needs to know of the node type a job runs on.
type Hardware struct {
	// Profile is the taxonomy hardware profile (h100, h200, ...).
	Profile string
	// GPUsPerNode and GPUMemoryGB come from the NodeType; zero means "take the taxonomy's".
	GPUsPerNode int32
	GPUMemoryGB int32
}

// Request asks for the master of one model on one kind of hardware.
type Request struct {
	// ModelID is the recipe's model id, e.g. "Qwen/Qwen3-32B".
	ModelID string
	// Variant defaults to "default".
	Variant string
	// Strategy defaults to the one the rules pick (single node when the model fits one node).
	Strategy string
	// Features turns recipe features on or off over their defaults.
	Features map[string]bool
	Hardware Hardware
	// Nodes forces the number of nodes per replica; 0 lets the rules decide.
	Nodes int32
}

// Has reports whether the book holds a recipe for modelID.
func (b *Book) Has(modelID string) bool {
	panic("PLACEHOLDER: built by the recipe helper")
}

// Derive returns the master for req. Errors name what is unknown and list what exists.
func (b *Book) Derive(req Request) (*v1alpha1.ModelMaster, error) {
	panic("PLACEHOLDER: built by the recipe helper")
}

// Parakeet returns the built-in master of the Parakeet speech-to-text runtime.
func Parakeet() *v1alpha1.ModelMaster {
	panic("PLACEHOLDER: built by the recipe helper")
}
