package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/lifecycle/jobfile"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/webhooktest"
)

// wrongJob is one wrong job of TestSameWordsEverywhere: the spec every path gets, and the
// words each path must refuse it with, in the policy's order.
type wrongJob struct {
	what         string
	tenant, name string
	spec         v1alpha1.ManagedInferenceJobSpec
	want         []string
	// argument: `jobs create` refuses the job's name as an argument (exit 2), with the same
	// details, before anything is planned.
	argument bool
}

func wrongJobs() []wrongJob {
	qwen := func(nodeType string, gpus, replicas int32) v1alpha1.ManagedInferenceJobSpec {
		return v1alpha1.ManagedInferenceJobSpec{Model: "Qwen/Qwen3-32B", NodeType: nodeType, GPUCount: gpus, Replicas: replicas}
	}
	long57, long58 := "l"+strings.Repeat("o", 55)+"g", "l"+strings.Repeat("o", 56)+"g"
	mistral := v1alpha1.ManagedInferenceJobSpec{Model: "mistral-small-24b", NodeType: "metal3.gpu-h100", GPUCount: 4, Replicas: 1}
	asParakeet := mistral
	asParakeet.GPUCount, asParakeet.Runtime = 1, v1alpha1.RuntimeParakeet
	parakeet := v1alpha1.ManagedInferenceJobSpec{Model: v1alpha1.ParakeetModel, Runtime: v1alpha1.RuntimeParakeet, NodeType: "metal3.gpu-h100", GPUCount: 2, Replicas: 1}
	kimi := v1alpha1.ManagedInferenceJobSpec{Model: "moonshotai/Kimi-K2-Instruct", NodeType: "metal3.gpu-h200", GPUCount: 8, Replicas: 1}
	kimi16 := kimi
	kimi16.GPUCount = 16
	kimiH100 := kimi16
	kimiH100.NodeType = "metal3.gpu-h100"
	return []wrongJob{
		{"a GPU count that is not the master's", "acme", "chat", qwen("metal3.gpu-h100", 2, 1), []string{
			`spec.gpuCount is 2: must equal perReplicaGPUCount 1 of ModelMaster qwen3-32b-h100`}, false},
		{"a node type the tenant may not use", "acme", "chat", qwen("metal3.gpu-h200", 1, 1), []string{
			`spec.nodeType is "metal3.gpu-h200": not allowed for Tenant acme (allowedNodeTypes: [metal3.gpu-h100]); Tenant acme may use: metal3.gpu-h100`}, false},
		{"an unknown node type, close to one the tenant may use", "acme", "chat", qwen("metal3.gpu-h10", 1, 1), []string{
			`spec.nodeType is "metal3.gpu-h10": no NodeType "metal3.gpu-h10" in the policy data; did you mean metal3.gpu-h100?`}, false},
		{"a tenant that may use no node type", "initech", "chat", qwen("metal3.gpu-h100", 1, 1), []string{
			`spec.nodeType is "metal3.gpu-h100": not allowed for Tenant initech (allowedNodeTypes: [] (no node type)); Tenant initech may use no node type (allowedNodeTypes: [])`}, false},
		{"an unknown node type, to a tenant that may use none", "initech", "chat", qwen("metal3.gpu-h100x", 1, 1), []string{
			`spec.nodeType is "metal3.gpu-h100x": no NodeType "metal3.gpu-h100x" in the policy data; Tenant initech may use no node type (allowedNodeTypes: [])`}, false},
		{"a name of 58 characters", "acme", long58, qwen("metal3.gpu-h100", 1, 1), []string{
			`metadata.name is "` + long58 + `": must be at most 57 characters (it has 58): it names the job's VMs, <job>-r<replica>-n<node>, up to <job>-r0-n0, and a VM name is at most 63`}, true},
		{"a name of 57 characters with 11 replicas", "acme", long57, qwen("metal3.gpu-h100", 1, 11), []string{
			`metadata.name is "` + long57 + `": must be at most 56 characters (it has 57): it names the job's VMs, <job>-r<replica>-n<node>, up to <job>-r10-n0, and a VM name is at most 63`}, true},
		{"a name that starts with a digit", "acme", "7b", qwen("metal3.gpu-h100", 1, 1), []string{
			`metadata.name is "7b": must be lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (it names the job's Services and VMs)`}, true},
		{"a hand-written master's GPU count", "acme", "chat", mistral, []string{
			`spec.gpuCount is 4: must equal perReplicaGPUCount 1 of ModelMaster mistral-small-24b`}, false},
		{"a runtime that is not the master's", "acme", "chat", asParakeet, []string{
			`spec.runtime is "parakeet": must match runtime "vllm" of ModelMaster mistral-small-24b`}, false},
		{"Parakeet on two GPUs", "acme", "asr", parakeet, []string{
			`spec.gpuCount is 2: must equal perReplicaGPUCount 1 of ModelMaster parakeet-tdt-0.6b-v3`}, false},
		{"a GPU count short of a two-node master", "globex", "kimi-2", kimi, []string{
			`spec.gpuCount is 8: must equal perReplicaGPUCount 16 of ModelMaster kimi-k2-instruct-h200`}, false},
		{"a two-node job over the tenant's GPU quota", "globex", "kimi-2", kimi16, []string{
			`spec.replicas is 1: needs 16 GPUs (1 replica x 16), but Tenant globex's GPU quota is 32 and its other jobs use 24 (kimi-k2 1x16, llama-70b 1x8): 8 left`}, false},
		{"a model the tenant's tier does not offer", "acme", "kimi", kimiH100, []string{
			`spec.model is "moonshotai/Kimi-K2-Instruct": not in Tenant acme's model catalogue (Qwen/*, meta-llama/*, mistral-small-24b, nvidia/parakeet-tdt-0.6b-v3, its tier's or narrower)`}, false},
	}
}

// TestSameWordsEverywhere holds a dozen wrong jobs to one answer from the four places that
// judge a job: `generate` (the job in the inputs), `validate` (the job file, with the inputs
// and recipes), `jobs create` (its flags) and the admission webhook, called by a real API
// server on a dry-run create of the job as the generator renders it (with the policy data
// the generator renders into the cluster, and the tenants' jobs it runs, which the quota
// counts). Each refuses it with the same words, the GPU quota and the tier's model catalogue
// included. Jobs the API server's own schema refuses before any webhook (replicas 0, no node
// type) are not here: the CRD answers those.
func TestSameWordsEverywhere(t *testing.T) {
	env := clusters.Get(t, "policy")
	tr := newJobsTree(t)
	in, err := inputs.Load(os.DirFS(tr.tenants), tr.tenants)
	require.NoError(t, err)
	book, err := recipe.Load(os.DirFS("../../recipes"))
	require.NoError(t, err)
	cases := wrongJobs()
	applyPolicyData(t, env, in, book, cases)
	srv := webhooktest.Serve(t, env.Config, webhook.ServeOptions{}, quietLogger())
	webhooktest.Register(t, env.Client, "inferplane-same-words", srv.URL, srv.CA, renderedJob(in, book, cases[0]))

	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			data, err := jobfile.Encode(c.name, c.spec)
			require.NoError(t, err)
			file := filepath.Join(tr.tenants, c.tenant, "jobs", c.name+".yaml")

			// generate, with the job in the inputs.
			require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
			require.NoError(t, os.WriteFile(file, data, 0o644))
			_, err = tr.run(t, "generate", "--dry-run")
			require.NoError(t, os.Remove(file))
			require.Error(t, err)
			assert.ElementsMatch(t, c.want, problemsOf(err.Error(), file), "generate")

			// validate, on the job file (its tenant from its folder) with the inputs and recipes.
			vfile := filepath.Join(t.TempDir(), c.tenant, "jobs", c.name+".yaml")
			require.NoError(t, os.MkdirAll(filepath.Dir(vfile), 0o755))
			require.NoError(t, os.WriteFile(vfile, data, 0o644))
			stdout, _, code := validateCLI(t, "validate", "--tenants", tr.tenants, "--recipes", "../../recipes", vfile)
			assert.Equal(t, 1, code, stdout)
			ref := "ManagedInferenceJob/" + c.tenant + "/" + c.name
			assert.Equal(t, c.want, denials(stdout, ref), "validate")

			// jobs create, with flags.
			_, err = tr.run(t, append([]string{"jobs", "create", c.tenant + "/" + c.name, "--dry-run"}, createArgs(c.spec)...)...)
			require.Error(t, err)
			if c.argument {
				assert.Equal(t, 2, exitCode(err))
				assert.Equal(t, `job "`+c.name+`": `+strings.Join(details(c.want, c.name), "; "), err.Error(), "jobs create")
			} else {
				assert.ElementsMatch(t, c.want, problemsOf(err.Error(), file), "jobs create")
			}

			// The webhook, through the API server's admission path.
			err = env.Client.Create(context.Background(), renderedJob(in, book, c), client.DryRunAll)
			require.Error(t, err)
			_, message, ok := strings.Cut(err.Error(), `admission webhook "managedinferencejobs.policy.inferplane.io" denied the request: `)
			require.True(t, ok, err.Error())
			assert.Equal(t, ref+": "+strings.Join(c.want, "; "), message, "webhook")
		})
	}
}

// problemsOf are the words of the problems an error of generate reports at file.
func problemsOf(text, file string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if words, ok := strings.CutPrefix(strings.TrimSpace(line), file+": "); ok {
			out = append(out, words)
		}
	}
	return out
}

// denials are the words of validate's DENY lines for ref.
func denials(stdout, ref string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if words, ok := strings.CutPrefix(line, "DENY "+ref+": "); ok {
			out = append(out, words)
		}
	}
	return out
}

// details are what the wanted words say about the name, without the field and value.
func details(want []string, name string) []string {
	out := make([]string, len(want))
	for i, w := range want {
		out[i] = strings.TrimPrefix(w, `metadata.name is "`+name+`": `)
	}
	return out
}

// createArgs are `jobs create`'s flags for spec.
func createArgs(spec v1alpha1.ManagedInferenceJobSpec) []string {
	flags := []string{"--model", spec.Model, "--node-type", spec.NodeType,
		"--gpus", strconv.Itoa(int(spec.GPUCount)), "--replicas", strconv.Itoa(int(spec.Replicas))}
	if spec.Runtime != "" {
		flags = append(flags, "--runtime", string(spec.Runtime))
	}
	return flags
}

// masterOf is the master the generator resolves for c's model, on c's node type when the
// inputs have it, else on metal3.gpu-h100: what the rendered job's model-master label names.
func masterOf(in *inputs.Inputs, book *recipe.Book, c wrongJob) *v1alpha1.ModelMaster {
	r := plan.NewResolver(in, book)
	nt := r.NodeType(c.spec.NodeType)
	if nt == nil {
		nt = r.NodeType("metal3.gpu-h100")
	}
	m, _, errs := r.Master(&v1alpha1.ManagedInferenceJob{Spec: c.spec}, nt)
	if len(errs) > 0 || m == nil {
		panic("the case's model resolves: " + c.spec.Model)
	}
	return m
}

// renderedJob is c's job as the generator renders it into the tenant's cluster: in the
// tenant's namespace, labelled with the tenant and the master.
func renderedJob(in *inputs.Inputs, book *recipe.Book, c wrongJob) *v1alpha1.ManagedInferenceJob {
	return &v1alpha1.ManagedInferenceJob{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindManagedInferenceJob},
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.tenant, Labels: map[string]string{
			v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelTenant: c.tenant,
			v1alpha1.LabelJob: c.name, v1alpha1.LabelModelMaster: masterOf(in, book, c).Name,
		}},
		Spec: c.spec,
	}
}

// applyPolicyData creates in the cluster what the generator renders as its policy data: the
// tenants, the node types and the masters of the cases, and the tenants' namespaces.
func applyPolicyData(t *testing.T, env *kubeenv.Env, in *inputs.Inputs, book *recipe.Book, cases []wrongJob) {
	t.Helper()
	ctx := context.Background()
	var objs []client.Object
	for i := range in.Tenants {
		objs = append(objs, &in.Tenants[i].Object)
		require.NoError(t, env.EnsureNamespace(ctx, in.Tenants[i].Object.Name))
	}
	for i := range in.NodeTypes {
		objs = append(objs, &in.NodeTypes[i].Object)
	}
	var names []string
	for _, c := range cases {
		if m := masterOf(in, book, c); !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
			objs = append(objs, m)
		}
	}
	// The jobs the tenants run, as their clusters hold them: what the quota counts.
	for i := range in.Tenants {
		for _, j := range in.Tenants[i].Jobs {
			c := wrongJob{tenant: in.Tenants[i].Object.Name, name: j.Object.Name, spec: j.Object.Spec}
			if m := masterOf(in, book, c); !slices.Contains(names, m.Name) {
				names = append(names, m.Name)
				objs = append(objs, m)
			}
			objs = append(objs, renderedJob(in, book, c))
		}
	}
	for _, o := range objs {
		o = o.DeepCopyObject().(client.Object)
		o.SetResourceVersion("")
		require.NoError(t, env.Client.Create(ctx, o), "%T %s", o, o.GetName())
	}
}

func quietLogger() logr.Logger {
	return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
