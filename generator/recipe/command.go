package recipe

import (
	"strconv"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// vLLM's parallel-size flags.
const (
	flagTP      = vllmargs.TensorParallelSize
	flagPP      = vllmargs.PipelineParallelSize
	flagDP      = vllmargs.DataParallelSize
	flagDPLocal = vllmargs.DataParallelSizeLocal
)

// singleNodeTP is upstream's resolveSingleNodeTp: the variant's tp, else the recipe's
// strategy_overrides.single_node_tp.tp (both capped at the node's GPUs, except on CPU
// profiles, whose gpu_count is not a limit), else 1 when vram_minimum_gb fits one GPU, else
// every GPU of the node. Other single-node strategies take every GPU.
func (d *derivation) singleNodeTP() int64 {
	g := d.gpusPerNode
	if d.strategy.Name != StrategySingleNodeTP {
		return g
	}
	capped := func(tp int64) int64 {
		if d.profile.Generation == "cpu" {
			return tp
		}
		return min(tp, g)
	}
	if tp, ok := d.variant.TP.For(d.profileID, d.profile); ok && tp > 0 {
		return capped(tp)
	}
	if so, ok := d.recipe.StrategyOverrides[StrategySingleNodeTP]; ok {
		if tp, ok := so.TP.For(d.profileID, d.profile); ok && tp > 0 {
			return capped(tp)
		}
	}
	need := d.variant.VRAMMinimumGB
	if need <= 0 || d.gpuMemGB <= 0 || need > d.gpuMemGB {
		return g
	}
	return 1
}

// parallelArgs are the parallel-size flags as upstream places them. The per-node launcher
// flags (--nnodes, --node-rank, --master-addr, --headless; --data-parallel-address,
// --data-parallel-start-rank) are the renderer's, per node.
func (d *derivation) parallelArgs() []string {
	s, g, n := d.strategy, d.gpusPerNode, d.nodes
	flag := s.ParallelFlag
	if flag == "" {
		flag = flagTP
	}
	switch {
	case s.DeployType != DeployMultiNode || n <= 1:
		return []string{flag, itoa(d.singleNodeTP())}
	case flag == flagDP:
		// DEP: one data-parallel rank per GPU, each node serving its own ranks.
		return []string{flagDP, itoa(g * n), flagDPLocal, itoa(g)}
	case s.Parallelism == "tp_pp":
		return []string{flagTP, itoa(g), flagPP, itoa(n)}
	case s.Parallelism == "tp_dp":
		// One model copy per node: TP inside it, DP across nodes.
		return []string{flagTP, itoa(g), flagDP, itoa(n), flagDPLocal, "1"}
	}
	return []string{flagTP, itoa(g * n)}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// byGeneration looks a hardware_overrides map up as upstream does: by the profile's
// generation, else, on NVIDIA GPUs, by an `nvidia` block.
func byGeneration[V any](m map[string]*V, p HardwareProfile) *V {
	if v := m[string(p.Generation)]; v != nil && p.Generation != "" {
		return v
	}
	if p.Brand == "NVIDIA" {
		return m["nvidia"]
	}
	return nil
}

// hardwareOverrides are the hardware_overrides entries that apply, in order: the strategy
// override's generation block when the recipe has one (it replaces the next two), else the
// recipe's and then the variant's; then the strategy override's block for the exact profile.
func (d *derivation) hardwareOverrides() []*Override {
	so := d.recipe.StrategyOverrides[d.strategy.Name]
	var out []*Override
	if sho := byGeneration(so.HardwareOverrides, d.profile); sho != nil {
		out = append(out, sho)
	} else {
		out = append(out, byGeneration(d.recipe.HardwareOverrides, d.profile), byGeneration(d.variant.HardwareOverrides, d.profile))
	}
	return append(out, so.HardwareOverrides[d.profileID])
}

// buildArgs puts the arguments together in upstream's order and applies the last-wins dedupe:
//  1. model.base_args
//  2. the variant's extra_args, then its hardware_overrides.<profile>.extra_args
//  3. the strategy's vllm_args, then the parallel-size flags
//  4. strategy_overrides.<strategy>.extra_args and .vllm_args
//  5. the hardware overrides (hardwareOverrides)
//  6. the features that are on, in pickFeatures' order (a feature's hardware_overrides args
//     replace its args on that hardware; a pick-one feature contributes its mode's args)
//  7. the KV offload option's args
func (d *derivation) buildArgs() []string {
	r, v, s := d.recipe, d.variant, d.strategy
	args := make([]string, 0, 64)
	args = append(args, r.Model.BaseArgs...)
	args = append(args, v.ExtraArgs...)
	if o := v.HardwareOverrides[d.profileID]; o != nil {
		args = append(args, o.ExtraArgs...)
	}
	args = append(args, s.VLLMArgs...)
	args = append(args, d.parallelArgs()...)
	so := r.StrategyOverrides[s.Name]
	args = append(args, so.ExtraArgs...)
	args = append(args, so.VLLMArgs...)
	for _, o := range d.hardwareOverrides() {
		if o != nil {
			args = append(args, o.ExtraArgs...)
		}
	}
	for _, name := range d.features {
		args = append(args, d.featureArgs(name)...)
	}
	if d.kv != nil {
		args = append(args, d.kv.Args...)
	}
	return vllmargs.Merge(args)
}

func (d *derivation) featureArgs(name string) []string {
	f := d.recipe.Features.Values[name]
	if f.Modes.Len() > 0 {
		key, ok := d.modes[name]
		if !ok {
			return nil
		}
		mode := f.Modes.Values[key]
		for _, k := range hardwareKeys(d.profileID, d.profile, true) {
			if o := mode.HardwareOverrides[k]; o != nil {
				if o.Args != nil {
					return o.Args
				}
				break
			}
		}
		return mode.Args
	}
	if o := byGeneration(f.HardwareOverrides, d.profile); o != nil && o.Args != nil {
		return o.Args
	}
	return f.Args
}

// buildEnv merges env in upstream's order, a later source replacing an earlier value in
// place: model.base_env, the variant's extra_env and hardware_overrides.<profile>.extra_env,
// the strategy's env, the KV offload option's env, strategy_overrides.<strategy>.env and
// .extra_env, then the hardware overrides as for the args.
func (d *derivation) buildEnv() []v1alpha1.EnvVar {
	r, v, s := d.recipe, d.variant, d.strategy
	var env envBuilder
	env.add(r.Model.BaseEnv)
	env.add(v.ExtraEnv)
	if o := v.HardwareOverrides[d.profileID]; o != nil {
		env.add(o.ExtraEnv)
	}
	env.add(s.Env)
	if d.kv != nil {
		env.add(d.kv.Env)
	}
	so := r.StrategyOverrides[s.Name]
	env.add(so.Env)
	env.add(so.ExtraEnv)
	for _, o := range d.hardwareOverrides() {
		if o != nil {
			env.add(o.ExtraEnv)
		}
	}
	return env.vars
}

type envBuilder struct {
	vars []v1alpha1.EnvVar
	at   map[string]int
}

func (e *envBuilder) add(o Env) {
	if e.at == nil {
		e.at = map[string]int{}
	}
	for _, k := range o.Keys {
		if i, ok := e.at[k]; ok {
			e.vars[i].Value = o.Values[k]
			continue
		}
		e.at[k] = len(e.vars)
		e.vars = append(e.vars, v1alpha1.EnvVar{Name: k, Value: o.Values[k]})
	}
}

// Default images by brand, as upstream's builder picks them.
var (
	defaultImages = map[string]string{
		"nvidia": v1alpha1.DefaultVLLMImage,
		"amd":    "vllm/vllm-openai-rocm:latest",
		"tpu":    "vllm/vllm-tpu:latest",
		"intel":  "vllm/vllm-openai-cpu:latest-x86_64",
	}
	nightlyImages = map[string]string{
		"nvidia": "vllm/vllm-openai:nightly",
		"amd":    "vllm/vllm-openai-rocm:nightly",
		"tpu":    "vllm/vllm-tpu:nightly",
	}
)

const xpuImage = "vllm/vllm-openai-xpu:latest"

// imageBrand is the brand key upstream picks images by.
func imageBrand(p HardwareProfile) string {
	switch {
	case p.Generation == "tpu":
		return "tpu"
	case p.Brand == "AMD":
		return "amd"
	case p.Generation == "cpu" || p.Generation == "xpu" || p.Brand == "Intel":
		return "intel"
	}
	return "nvidia"
}

// buildImage: the variant's hardware_overrides.<profile>.docker_image, else the variant's
// docker_image, else the model's (each a plain image for NVIDIA, a brand map or a CUDA map,
// cu130 preferred), else the brand's default image (v1alpha1.DefaultVLLMImage, a pinned release, on
// NVIDIA; upstream says vllm/vllm-openai:latest, a tag that moves).
func (d *derivation) buildImage() string {
	p := d.profile
	brand := imageBrand(p)
	pinned, cuda := "", map[string]string(nil)
	if o := d.variant.HardwareOverrides[d.profileID]; o != nil && o.DockerImage != nil && o.DockerImage.Single != "" {
		pinned = o.DockerImage.Single
	}
	apply := func(im *Image) {
		if im == nil || pinned != "" || cuda != nil {
			return
		}
		switch {
		case im.Single != "":
			if brand == "nvidia" {
				pinned = im.Single
			}
		case im.ByBrand != nil:
			bv := im.ByBrand[brand]
			if bv.Single != "" {
				pinned = bv.Single
			} else if brand == "nvidia" && bv.CUDA != nil {
				cuda = bv.CUDA
			}
		case im.CUDA != nil:
			if brand == "nvidia" {
				cuda = im.CUDA
			}
		}
	}
	apply(d.variant.DockerImage)
	apply(d.recipe.Model.DockerImage)
	switch {
	case pinned != "":
		return pinned
	case p.Generation == "xpu":
		return xpuImage
	case cuda["cu130"] != "":
		return cuda["cu130"]
	case cuda["cu129"] != "":
		return cuda["cu129"]
	}
	if d.recipe.Model.NightlyRequired && nightlyImages[brand] != "" {
		return nightlyImages[brand]
	}
	return defaultImages[brand]
}

// sizes reads the parallel sizes back from the final args (an override may have replaced the
// strategy's: MiniMax-M2 on AMD runs TP 2, not the node's 8) and checks that they fit the
// replica's nodes: one node holds at most its GPUs; a multi-node replica takes every GPU of
// every node, TP x PP across the --nnodes launcher, or data-parallel-size-local ranks of
// TP x PP GPUs on each node under the data-parallel launcher.
func (d *derivation) sizes() error {
	par, _ := vllmargs.ParseSizes(d.args)
	d.tp, d.pp, d.dp = max(par.TP, 1), max(par.PP, 1), max(par.DP, 1)
	total, g, n := d.tp*d.pp*d.dp, d.gpusPerNode, d.nodes
	uses := func() string {
		return "tensor " + itoa(d.tp) + " x pipeline " + itoa(d.pp) + " x data " + itoa(d.dp) + " = " + itoa(total) + " GPUs"
	}
	switch {
	case n == 1 && total > g:
		return newError(ReasonArgsMismatch, "strategy", "the serving args of recipe %s with strategy %s on %s use %s, more than the %d of one %s node",
			d.recipe.ID, d.strategy.Name, d.profileID, uses(), g, d.profileID)
	case n == 1:
		d.perReplica = total
	case d.dp > 1:
		local := par.DPLocal
		if local < 1 || local*d.tp*d.pp != g || d.dp != local*n {
			return newError(ReasonArgsMismatch, "strategy", "the serving args of recipe %s with strategy %s on %d %s nodes use %s with %s %d on each node, not the %d GPUs of each of the %d nodes",
				d.recipe.ID, d.strategy.Name, n, d.profileID, uses(), flagDPLocal, local, g, n)
		}
		d.perReplica = total
	case total != g*n:
		return newError(ReasonArgsMismatch, "strategy", "the serving args of recipe %s with strategy %s on %d %s nodes use %s, not the %d GPUs of the %d nodes",
			d.recipe.ID, d.strategy.Name, n, d.profileID, uses(), g*n, n)
	default:
		d.perReplica = total
	}
	return nil
}
