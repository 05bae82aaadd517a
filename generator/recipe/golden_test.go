package recipe_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/generator/recipe"
)

var update = flag.Bool("update", false, "rewrite the golden masters in testdata/golden")

// goldenMasters are derived masters kept whole in testdata/golden/<name>.yaml: at least one
// per strategy inferplane renders and per hardware brand. Each was checked by hand against the
// command upstream's builder (src/lib/command-synthesis.js at 8959cf6) renders for the same
// choice, quoted above it: the master's args are that command after `vllm serve <model>`
// without the per-node launcher flags (--nnodes/--node-rank/--master-addr/--headless,
// --data-parallel-address/--data-parallel-start-rank), which the renderer adds per node.
// TestUpstreamOracle runs the same comparison mechanically over every combination.
var goldenMasters = []struct {
	name string
	req  recipe.Request
}{
	// single_node_tp, NVIDIA Hopper: 77 GB fits one 80 GB GPU.
	//   vllm serve Qwen/Qwen3-32B --tensor-parallel-size 1 --enable-auto-tool-choice \
	//     --tool-call-parser hermes --reasoning-parser qwen3
	{"qwen3-32b-h100", recipe.Request{ModelID: "Qwen/Qwen3-32B", Hardware: hw("h100")}},

	// single_node_tp, AMD: the recipe's amd override sets TP 2 and wins the dedupe, so the
	// replica claims 2 GPUs. Image vllm/vllm-openai-rocm:latest, env VLLM_ROCM_USE_AITER=1
	// VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT=1.
	//   vllm serve MiniMaxAI/MiniMax-M2 --trust-remote-code --tensor-parallel-size 2 \
	//     --attention-backend ROCM_AITER_FA --tool-call-parser minimax_m2 \
	//     --enable-auto-tool-choice --reasoning-parser minimax_m2
	{"minimax-m2-mi300x", recipe.Request{ModelID: "MiniMaxAI/MiniMax-M2", Hardware: hw("mi300x")}},

	// single_node_tep, env VLLM_USE_FLASHINFER_MOE_FP8=1 (hopper override).
	//   vllm serve deepseek-ai/DeepSeek-R1 --trust-remote-code --enable-expert-parallel \
	//     --tensor-parallel-size 8 --enable-auto-tool-choice --tool-call-parser deepseek_v3 \
	//     --chat-template examples/tool_chat_template_deepseekr1.jinja --reasoning-parser deepseek_r1
	{"deepseek-r1-tep-h200", recipe.Request{ModelID: "deepseek-ai/DeepSeek-R1", Strategy: "single_node_tep", Hardware: hw("h200")}},

	// single_node_dep, NVIDIA Blackwell: the recipe's override forces DP 4, so 4 GPUs, not 8.
	// Image vllm/vllm-openai:v0.25.0; the default variant's checkpoint and its DSpark mode.
	//   vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 --trust-remote-code --kv-cache-dtype fp8 \
	//     --block-size 256 --enable-expert-parallel --data-parallel-size 4 \
	//     --compilation-config '{"cudagraph_mode":"FULL_AND_PIECEWISE", "custom_ops":["all"]}' \
	//     --attention_config.use_fp4_indexer_cache True --moe-backend deep_gemm_mega_moe \
	//     --tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 --enable-auto-tool-choice \
	//     --reasoning-parser deepseek_v4 \
	//     --reasoning-config '{"reasoning_parser":"deepseek_v4","reasoning_start_str":"","reasoning_end_str":""}' \
	//     --speculative-config '{"method":"dspark","num_speculative_tokens":7,"draft_sample_method":"probabilistic"}'
	{"deepseek-v4-flash-dep-b200", recipe.Request{ModelID: "deepseek-ai/DeepSeek-V4-Flash", Strategy: "single_node_dep", Hardware: hw("b200")}},

	// multi_node_tp: strategy_min_gpus gives Kimi-K3 32 GPUs on h100, so four nodes, TP 32.
	// Env GLOO_SOCKET_IFNAME=NCCL_SOCKET_IFNAME=$IFACE_NAME VLLM_ENGINE_READY_TIMEOUT_S=3600
	// VLLM_USE_V2_MODEL_RUNNER=1 VLLM_USE_RUST_FRONTEND=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
	//   vllm serve moonshotai/Kimi-K3 --trust-remote-code --tensor-parallel-size 32 \
	//     --nnodes 4 --node-rank 0 --master-addr $HEAD_IP \
	//     --gpu-memory-utilization 0.97 --max-num-seqs 5 --max-model-len 32768 --moe-backend marlin \
	//     --disable-custom-all-reduce --no-enable-flashinfer-autotune --max-num-batched-tokens 4096 \
	//     --attention-backend FLASHMLA --enable-auto-tool-choice --tool-call-parser kimi_k3 \
	//     --reasoning-parser kimi_k3
	//   ranks 1-3: --node-rank 1..3 --master-addr $HEAD_IP --headless
	{"kimi-k3-h100", recipe.Request{ModelID: "moonshotai/Kimi-K3", Hardware: hw("h100")}},

	// multi_node_tep on GB200 NVL4 trays (4 GPUs each): TP 8 over two trays.
	//   vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 --trust-remote-code --enable-expert-parallel \
	//     --tensor-parallel-size 8 --nnodes 2 --node-rank 0 --master-addr $HEAD_IP \
	//     --enable-auto-tool-choice --tool-call-parser hermes
	//   rank 1: --node-rank 1 --master-addr $HEAD_IP --headless
	{"qwen3-235b-tep-gb200", recipe.Request{ModelID: "Qwen/Qwen3-235B-A22B-Instruct-2507", Strategy: "multi_node_tep", Hardware: hw("gb200")}},

	// multi_node_dep: one data-parallel rank per GPU, eight per node, every node serving its own
	// (hybrid load balancing).
	//   vllm serve deepseek-ai/DeepSeek-V3.2 --trust-remote-code \
	//     --kernel-config.enable_flashinfer_autotune=False --enable-expert-parallel \
	//     --data-parallel-hybrid-lb --data-parallel-size 16 --data-parallel-size-local 8 \
	//     --data-parallel-address $HEAD_IP --tokenizer-mode deepseek_v32 \
	//     --tool-call-parser deepseek_v32 --enable-auto-tool-choice --reasoning-parser deepseek_v3
	//   rank 1: --data-parallel-address $HEAD_IP --data-parallel-start-rank 8
	{"deepseek-v3.2-dep-h200", recipe.Request{ModelID: "deepseek-ai/DeepSeek-V3.2", Strategy: "multi_node_dep", Hardware: hw("h200")}},

	// multi_node_tp_pp: TP inside the node, PP across two.
	//   vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 8 \
	//     --pipeline-parallel-size 2 --nnodes 2 --node-rank 0 --master-addr $HEAD_IP \
	//     --async-scheduling --no-enable-prefix-caching --max-num-batched-tokens 8192
	//   rank 1: --node-rank 1 --master-addr $HEAD_IP --headless
	{"llama-3.3-70b-tp-pp-h100", recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", Strategy: "multi_node_tp_pp", Hardware: hw("h100")}},

	// multi_node_tp_dp: one model copy per GB200 tray (TP 4), DP 4 across the four trays the
	// recipe's strategy_min_gpus (16) asks for.
	//   vllm serve moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 \
	//     --tensor-parallel-size 4 --data-parallel-size 4 --data-parallel-size-local 1 \
	//     --data-parallel-address $HEAD_IP --load-format fastsafetensors \
	//     --no-enable-flashinfer-autotune --max-model-len 1048576 --kv-cache-dtype fp8 \
	//     --attention-config '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}' \
	//     --enable-prefix-caching --enable-auto-tool-choice --tool-call-parser kimi_k3 \
	//     --reasoning-parser kimi_k3
	//   ranks 1-3: --data-parallel-address $HEAD_IP --data-parallel-start-rank 1..3
	{"kimi-k3-tp-dp-gb200", recipe.Request{ModelID: "moonshotai/Kimi-K3", Strategy: "multi_node_tp_dp", Hardware: hw("gb200")}},

	// Google TPU (image vllm/vllm-tpu:latest).
	//   vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1
	{"llama-3.1-8b-trillium", recipe.Request{ModelID: "meta-llama/Llama-3.1-8B-Instruct", Hardware: hw("trillium")}},

	// Intel Xeon CPU: the recipe's tp for xeon6 (2), not capped by the profile's gpu_count
	// (image vllm/vllm-openai-cpu:latest-x86_64).
	//   vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2
	{"llama-3.1-8b-xeon6", recipe.Request{ModelID: "meta-llama/Llama-3.1-8B-Instruct", Hardware: hw("xeon6")}},

	// Intel Arc XPU (image vllm/vllm-openai-xpu:latest).
	//   vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 1
	{"llama-3.1-8b-arc-pro-b60", recipe.Request{ModelID: "meta-llama/Llama-3.1-8B-Instruct", Hardware: hw("arc_pro_b60")}},

	// Huawei Ascend (image vllm/vllm-openai:qwen38, the recipe's own).
	//   vllm serve Qwen/Qwen3.8-27B --tensor-parallel-size 1 --enable-auto-tool-choice \
	//     --tool-call-parser qwen3_coder --reasoning-parser qwen3 --mm-encoder-tp-mode data
	{"qwen3.8-27b-ascend", recipe.Request{ModelID: "Qwen/Qwen3.8-27B", Hardware: hw("ascend_950pr")}},

	// A pick-one feature's mode: spec_decoding (opt-in) turned on in mode mtp, appended after
	// the default features as the builder appends a feature switched on.
	//   vllm serve deepseek-ai/DeepSeek-V4-Pro --trust-remote-code --kv-cache-dtype fp8 \
	//     --block-size 256 --enable-expert-parallel --tensor-parallel-size 8 \
	//     --compilation-config '{"cudagraph_mode":"FULL_AND_PIECEWISE", "custom_ops":["all"]}' \
	//     --attention_config.use_fp4_indexer_cache=True --moe-backend deep_gemm_mega_moe \
	//     --tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 --enable-auto-tool-choice \
	//     --reasoning-parser deepseek_v4 --speculative-config '{"method":"mtp","num_speculative_tokens":2}'
	{"deepseek-v4-pro-fp8-mtp-b200", recipe.Request{ModelID: "deepseek-ai/DeepSeek-V4-Pro", Variant: "fp8",
		FeatureModes: map[string]string{"spec_decoding": "mtp"}, Hardware: hw("b200")}},

	// text_only turned on turns encoder_parallel off (features tool_calling, reasoning,
	// text_only).
	//   vllm serve Qwen/Qwen3.5-35B-A3B --trust-remote-code --tensor-parallel-size 1 \
	//     --enable-auto-tool-choice --tool-call-parser qwen3_coder --reasoning-parser qwen3 \
	//     --language-model-only
	{"qwen3.5-35b-text-only-h200", recipe.Request{ModelID: "Qwen/Qwen3.5-35B-A3B", Features: map[string]bool{"text_only": true}, Hardware: hw("h200")}},

	// KV offload offloading_fs (the recipe marks it verified): its config last, PYTHONHASHSEED=0.
	//   vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 8 --async-scheduling \
	//     --no-enable-prefix-caching --max-num-batched-tokens 8192 \
	//     --kv-transfer-config '{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{"spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":34359738368,"blocks_per_chunk":4,"eviction_policy":"lru","secondary_tiers":[{"type":"fs","root_dir":"/mnt/kv_cache","n_read_threads":32,"n_write_threads":16}]}}'
	{"llama-3.3-70b-offloading-fs-h200", recipe.Request{ModelID: "meta-llama/Llama-3.3-70B-Instruct", KVOffload: "offloading_fs", Hardware: hw("h200")}},

	// KV offload simple.
	//   vllm serve Qwen/Qwen3-32B --tensor-parallel-size 1 --enable-auto-tool-choice \
	//     --tool-call-parser hermes --reasoning-parser qwen3 \
	//     --kv-transfer-config '{"kv_connector":"SimpleCPUOffloadConnector","kv_role":"kv_both","kv_connector_extra_config":{"cpu_bytes_to_use_per_rank":236223201280,"lazy_offload":false}}'
	{"qwen3-32b-simple-h100", recipe.Request{ModelID: "Qwen/Qwen3-32B", KVOffload: "simple", Hardware: hw("h100")}},
}

func TestGoldenMasters(t *testing.T) {
	b := bundled(t)
	for _, tc := range goldenMasters {
		t.Run(tc.name, func(t *testing.T) {
			m, err := b.Derive(tc.req)
			require.NoError(t, err)
			got, err := yaml.Marshal(m)
			require.NoError(t, err)
			file := filepath.Join("testdata", "golden", tc.name+".yaml")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
				require.NoError(t, os.WriteFile(file, got, 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "run go test -run TestGoldenMasters -update to write it")
			assert.Equal(t, string(want), string(got))
		})
	}
}
