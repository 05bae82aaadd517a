package recipe_test

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/vllmargs"
	"github.com/inferplane/inferplane/policy"
)

// TestConformanceWholeCorpus holds the bundled corpus (upstream's 173 recipes at 8959cf6) to
// the derivation's contract: every recipe loads; every (recipe, hardware, variant, strategy)
// combination upstream's site offers either derives a master whose GPUs are the GPUs its args
// use, laid out the way the webhook admits it, or is refused with a derivation error naming the
// reason. The counts are asserted, so a change in what derives is seen (docs/recipes.md
// quotes them).
func TestConformanceWholeCorpus(t *testing.T) {
	b := bundled(t)
	files, err := fs.Glob(os.DirFS(bundledDir), "models/*/*.yaml")
	require.NoError(t, err)
	require.Len(t, b.Models(), len(files), "every recipe file loads")

	tax := b.Taxonomy()
	var combos, derived int
	refused := map[string]int{}
	omni := 0
	for _, id := range b.Models() {
		r, _, _ := b.Model(id)
		offers := b.Offers(id)
		if slices.Contains(r.Meta.Tasks, "omni") {
			omni++
			assert.Empty(t, offers, "%s: upstream renders vllm-omni recipes apart", id)
			_, err := b.Derive(recipe.Request{ModelID: id, Hardware: hw("h200")})
			assert.Equal(t, recipe.ReasonUnsupportedRecipe, recipe.Reason(err), id)
			continue
		}
		for _, o := range offers {
			combos++
			m, err := b.Derive(recipe.Request{ModelID: id, Variant: o.Variant, Strategy: o.Strategy, Hardware: hw(o.Hardware)})
			where := fmt.Sprintf("%s %s/%s/%s", id, o.Variant, o.Hardware, o.Strategy)
			if err != nil {
				require.NotEmpty(t, recipe.Reason(err), "%s: %v is not a derivation error", where, err)
				require.NotEmpty(t, recipe.Field(err), where)
				refused[refusalReason(o, err)]++
				continue
			}
			derived++
			checkConformingMaster(t, where, m, tax.HardwareProfiles.Values[o.Hardware])
		}
	}
	total := 0
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(refused)) {
		total += refused[k]
		lines = append(lines, fmt.Sprintf("%6d  %s", refused[k], k))
	}
	t.Logf("%d recipes (%d vllm-omni, refused whole); %d (recipe, hardware, variant, strategy) combinations upstream offers: %d derive, %d refused:\n%s",
		len(b.Models()), omni, combos, derived, total, strings.Join(lines, "\n"))

	assert.Equal(t, 25, omni)
	assert.Equal(t, 10719, combos)
	assert.Equal(t, 9509, derived)
	assert.Equal(t, map[string]int{
		"pd_cluster is not rendered": 710,
		"does not fit one node (a single-node strategy; upstream treats memory as a hint)": 318,
		"does not fit hardware that cannot be clustered":                                   31,
		"the args use other GPUs than the layout has (an override's parallel size)":        151,
	}, refused)
}

// refusalReason sorts a refusal into the reasons docs/recipes.md lists.
func refusalReason(o recipe.Offer, err error) string {
	why, msg := recipe.Reason(err), err.(*field.Error).Detail
	switch {
	case why == recipe.ReasonUnsupportedStrategy && o.Strategy == recipe.StrategyPDCluster:
		return "pd_cluster is not rendered"
	case why == recipe.ReasonDoesNotFit && strings.Contains(msg, "scalable: false"):
		return "does not fit hardware that cannot be clustered"
	case why == recipe.ReasonDoesNotFit && strings.HasPrefix(msg, "does not fit one node with strategy"):
		return "does not fit one node (a single-node strategy; upstream treats memory as a hint)"
	case why == recipe.ReasonArgsMismatch:
		return "the args use other GPUs than the layout has (an override's parallel size)"
	}
	return "other: " + why + ": " + msg
}

// checkConformingMaster asserts what every derived master owes the renderer and the webhook.
func checkConformingMaster(t *testing.T, where string, m *v1alpha1.ModelMaster, p recipe.HardwareProfile) {
	t.Helper()
	s := m.Spec
	assert.Empty(t, policy.CheckMaster(m), where)

	// The GPUs the args use, read independently of the derivation.
	size := func(flag string) int {
		v, ok := vllmargs.Value(s.Args, flag)
		if !ok {
			return 1
		}
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s: %s %q", where, flag, v)
		return n
	}
	tp, pp, dp := size("--tensor-parallel-size"), size("--pipeline-parallel-size"), size("--data-parallel-size")
	assert.Equal(t, tp*pp*dp, int(s.PerReplicaGPUCount), "%s: perReplicaGPUCount = the GPUs the args use", where)
	assert.Equal(t, tp, int(s.TensorParallelSize), where)
	assert.Equal(t, pp, int(s.PipelineParallelSize), where)
	assert.Equal(t, dp, max(int(s.DataParallelSize), 1), where)

	nt := &v1alpha1.NodeType{Spec: v1alpha1.NodeTypeSpec{GPU: v1alpha1.NodeGPU{Count: int32(p.GPUCount)}}}
	nt.Name = "taxonomy-" + s.HardwareProfile
	layout, err := policy.ReplicaLayout(m, nt)
	require.NoError(t, err, where)
	assert.Equal(t, s.Source.Nodes, layout.Nodes, "%s: the webhook's layout has the nodes the master was derived for", where)
	if layout.Nodes > 1 {
		assert.EqualValues(t, p.GPUCount, layout.GPUsPerNode, "%s: a multi-node replica takes whole nodes", where)
		_, dataParallel := vllmargs.Value(s.Args, "--data-parallel-size-local")
		assert.Equal(t, dataParallel, layout.DataParallelLocal > 0, where)
	}
	for _, a := range s.Args {
		switch a {
		case "--nnodes", "--node-rank", "--master-addr", "--headless", "--data-parallel-address", "--data-parallel-start-rank":
			t.Errorf("%s: launcher flag %s in the master's args (the renderer adds them per node)", where, a)
		}
	}
	assert.Equal(t, s.Args, vllmargs.Merge(s.Args), "%s: args are deduplicated", where)
}
