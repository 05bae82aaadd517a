package policy

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// CheckMaster is the ModelMaster sanity rule: a positive perReplicaGPUCount, a known runtime,
// no parallelism for Parakeet, and tensor x pipeline (x data) parallel sizes, from the fields
// or the serving args, that multiply to perReplicaGPUCount.
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
		}{{"tensor parallel size", par.tp}, {"pipeline parallel size", par.pp}, {"data parallel size", par.dp}} {
			if f.v > 1 {
				out = append(out, field.Invalid(specPath, omit,
					fmt.Sprintf("a %s of %d: a Parakeet master has no parallelism (one process, one node)", f.field, f.v)))
			}
		}
		return out
	}
	if par.set() && s.PerReplicaGPUCount >= 1 {
		if gpus, ok := par.gpus(int64(s.PerReplicaGPUCount)); !ok || gpus != int64(s.PerReplicaGPUCount) {
			out = append(out, field.Invalid(gpusPath, s.PerReplicaGPUCount,
				fmt.Sprintf("must equal the GPUs its parallelism uses, %s", par.describe())))
		}
	}
	return out
}

// checkMasterSizes checks the parallel-size fields and flags on their own: positive sizes, and
// fields that agree with the args where both are set (the fields repeat what the args select).
func checkMasterSizes(s *v1alpha1.ModelMasterSpec) field.ErrorList {
	var out field.ErrorList
	par, bad := parseParallelism(s.Args)
	sizes := []struct {
		field, flag string
		v           int32
		arg         int64
	}{
		{"tensorParallelSize", flagTP, s.TensorParallelSize, par.tp},
		{"pipelineParallelSize", flagPP, s.PipelineParallelSize, par.pp},
		{"dataParallelSize", flagDP, s.DataParallelSize, par.dp},
	}
	for _, f := range sizes {
		if f.v < 0 {
			out = append(out, field.Invalid(specPath.Child(f.field), f.v, "must be at least 1 when set"))
		}
	}
	for _, b := range bad {
		out = append(out, field.Invalid(specPath.Child("args"), b.flag+" "+b.value, "the size must be a positive whole number"))
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
func masterParallelism(m *v1alpha1.ModelMaster) parallelism {
	par, _ := parseParallelism(m.Spec.Args)
	return par.override(fieldParallelism(&m.Spec))
}

// fieldParallelism is the parallelism the master's fields state (0: not stated).
func fieldParallelism(s *v1alpha1.ModelMasterSpec) parallelism {
	return parallelism{tp: int64(max(s.TensorParallelSize, 0)), pp: int64(max(s.PipelineParallelSize, 0)), dp: int64(max(s.DataParallelSize, 0))}
}

// vLLM's parallelism flags (long and short forms).
const (
	flagTP = "--tensor-parallel-size"
	flagPP = "--pipeline-parallel-size"
	flagDP = "--data-parallel-size"
	// flagDPLocal is the data-parallel ranks one node runs under vLLM's data-parallel
	// launcher (a multi-node replica whose nodes each start their own ranks).
	flagDPLocal = "--data-parallel-size-local"
)

var parallelFlags = map[string]string{
	flagTP: flagTP, "-tp": flagTP,
	flagPP: flagPP, "-pp": flagPP,
	flagDP: flagDP, "-dp": flagDP,
	flagDPLocal: flagDPLocal, "-dpl": flagDPLocal,
}

// parallelism is what a vLLM command line asks for; 0 means not set.
type parallelism struct{ tp, pp, dp, dpLocal int64 }

func (p parallelism) set() bool { return p.tp > 0 || p.pp > 0 || p.dp > 0 }

// gpus multiplies the sizes; ok is false once the product exceeds limit (no overflow).
func (p parallelism) gpus(limit int64) (int64, bool) {
	prod := int64(1)
	for _, v := range []int64{p.tp, p.pp, p.dp} {
		if v > 0 {
			prod *= v
			if prod > limit {
				return prod, false
			}
		}
	}
	return prod, true
}

func (p parallelism) describe() string {
	one := func(v int64) int64 {
		if v > 0 {
			return v
		}
		return 1
	}
	s := fmt.Sprintf("tensor %d x pipeline %d", one(p.tp), one(p.pp))
	if p.dp > 0 {
		s += fmt.Sprintf(" x data %d", p.dp)
	}
	if g, ok := p.gpus(1 << 40); ok {
		s += fmt.Sprintf(" = %d", g)
	}
	return s
}

// override returns p with the sizes q sets replacing p's (vLLM: the last flag wins).
func (p parallelism) override(q parallelism) parallelism {
	if q.tp > 0 {
		p.tp = q.tp
	}
	if q.pp > 0 {
		p.pp = q.pp
	}
	if q.dp > 0 {
		p.dp = q.dp
	}
	return p
}

type badFlag struct{ flag, value string }

// parseParallelism reads the last value of each parallelism flag in args, in the "--flag N"
// and "--flag=N" forms.
func parseParallelism(args []string) (parallelism, []badFlag) {
	var p parallelism
	var bad []badFlag
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		flag, ok := parallelFlags[name]
		if !ok {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				bad = append(bad, badFlag{name, "(no value)"})
				continue
			}
			i++
			value = args[i]
		}
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil || n < 1 {
			bad = append(bad, badFlag{name, value})
			continue
		}
		switch flag {
		case flagTP:
			p.tp = n
		case flagPP:
			p.pp = n
		case flagDP:
			p.dp = n
		case flagDPLocal:
			p.dpLocal = n
		}
	}
	return p, bad
}

func itoa[T ~int32 | ~int64 | ~int](v T) string { return strconv.FormatInt(int64(v), 10) }
