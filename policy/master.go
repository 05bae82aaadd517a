package policy

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// CheckMaster is the ModelMaster sanity rule: a positive perReplicaGPUCount, a known runtime,
// no parallelism for Parakeet, and, for vLLM, tensor x pipeline (x data) parallel sizes, from
// the fields or the serving args, that multiply to perReplicaGPUCount (set whenever it is more
// than one GPU).
func CheckMaster(m *v1alpha1.ModelMaster) field.ErrorList {
	var out field.ErrorList
	s := &m.Spec
	gpusPath := specPath.Child("perReplicaGPUCount")
	if s.PerReplicaGPUCount < 1 {
		out = append(out, field.Invalid(gpusPath, s.PerReplicaGPUCount, "must be at least 1"))
	}
	switch s.Runtime {
	case v1alpha1.RuntimeVLLM, v1alpha1.RuntimeParakeet:
	default:
		out = append(out, field.Invalid(specPath.Child("runtime"), string(s.Runtime),
			fmt.Sprintf("must be %q or %q", v1alpha1.RuntimeVLLM, v1alpha1.RuntimeParakeet)))
	}
	if s.Model == "" {
		out = append(out, field.Invalid(specPath.Child("model"), "", "must name the model the server loads"))
	}
	out = append(out, checkMasterSizes(s)...)
	par := masterParallelism(m)

	if s.Runtime == v1alpha1.RuntimeParakeet {
		for _, f := range []struct {
			field string
			v     int64
		}{{"tensor parallel size", par.TP}, {"pipeline parallel size", par.PP}, {"data parallel size", par.DP}} {
			if f.v > 1 {
				out = append(out, field.Invalid(specPath, fielderr.Omit,
					fmt.Sprintf("a %s of %d: a Parakeet master has no parallelism (one process, one node)", f.field, f.v)))
			}
		}
		return out
	}
	if !par.Set() && s.PerReplicaGPUCount > 1 {
		out = append(out, field.Required(specPath.Child("tensorParallelSize"), fmt.Sprintf(
			"must be set, or parallel sizes in spec.args, to use the %d GPUs the master claims (e.g. tensorParallelSize: %d): "+
				"without, vLLM uses one", s.PerReplicaGPUCount, s.PerReplicaGPUCount)))
	}
	if par.Set() && s.PerReplicaGPUCount >= 1 {
		if gpus, ok := par.GPUs(int64(s.PerReplicaGPUCount)); !ok || gpus != int64(s.PerReplicaGPUCount) {
			out = append(out, field.Invalid(gpusPath, s.PerReplicaGPUCount,
				fmt.Sprintf("must equal the GPUs its parallelism uses, %s", par.Describe())))
		}
	}
	return out
}

// checkMasterSizes checks the parallel-size fields and flags on their own: positive sizes, and
// fields that agree with the args where both are set (the fields repeat what the args select).
func checkMasterSizes(s *v1alpha1.ModelMasterSpec) field.ErrorList {
	var out field.ErrorList
	par, bad := vllmargs.ParseSizes(s.Args)
	sizes := []struct {
		field, flag string
		v           int32
		arg         int64
	}{
		{"tensorParallelSize", vllmargs.TensorParallelSize, s.TensorParallelSize, par.TP},
		{"pipelineParallelSize", vllmargs.PipelineParallelSize, s.PipelineParallelSize, par.PP},
		{"dataParallelSize", vllmargs.DataParallelSize, s.DataParallelSize, par.DP},
	}
	for _, f := range sizes {
		if f.v < 0 {
			out = append(out, field.Invalid(specPath.Child(f.field), f.v, "must be at least 1 when set"))
		}
	}
	for _, b := range bad {
		out = append(out, field.Invalid(specPath.Child("args"), b.Flag+" "+b.Value, "the size must be a positive whole number"))
	}
	for _, f := range sizes {
		if f.v > 0 && f.arg > 0 && int64(f.v) != f.arg {
			out = append(out, field.Invalid(specPath.Child(f.field), f.v, fmt.Sprintf("spec.args sets %s %d: the two must agree", f.flag, f.arg)))
		}
	}
	return out
}

// masterParallelism is the parallelism a master's server runs with: its args, with the fields
// taking precedence (they are what the generator derived; invalid flags are CheckMaster's).
func masterParallelism(m *v1alpha1.ModelMaster) vllmargs.Sizes {
	par, _ := vllmargs.ParseSizes(m.Spec.Args)
	return par.Override(fieldParallelism(&m.Spec))
}

// fieldParallelism is the parallelism the master's fields state (0: not stated).
func fieldParallelism(s *v1alpha1.ModelMasterSpec) vllmargs.Sizes {
	return vllmargs.Sizes{TP: int64(max(s.TensorParallelSize, 0)), PP: int64(max(s.PipelineParallelSize, 0)), DP: int64(max(s.DataParallelSize, 0))}
}

func itoa[T ~int32 | ~int64 | ~int](v T) string { return strconv.FormatInt(int64(v), 10) }
