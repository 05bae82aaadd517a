package render_test

import (
	"cmp"
	"fmt"
	"maps"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
)

// jobFolder is a rendered job folder decoded into the upstream Go types (strictly: a field
// the types do not know fails the decode).
type jobFolder struct {
	vms      map[string]kubevirtv1.VirtualMachine
	secrets  map[string]corev1.Secret
	pvcs     map[string]corev1.PersistentVolumeClaim
	services map[string]corev1.Service
}

func loadJob(t *testing.T, files render.Files, job string) jobFolder {
	t.Helper()
	f := jobFolder{
		vms: map[string]kubevirtv1.VirtualMachine{}, secrets: map[string]corev1.Secret{},
		pvcs: map[string]corev1.PersistentVolumeClaim{}, services: map[string]corev1.Service{},
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if path.Dir(p) != render.JobDir(job) {
			continue
		}
		data := files[p]
		var tm struct{ Kind string }
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		strict := func(into any) {
			if err := yaml.UnmarshalStrict(data, into); err != nil {
				t.Fatalf("%s: strict decode as %s: %v", p, tm.Kind, err)
			}
		}
		switch tm.Kind {
		case "VirtualMachine":
			var vm kubevirtv1.VirtualMachine
			strict(&vm)
			f.vms[vm.Name] = vm
		case "Secret":
			var s corev1.Secret
			strict(&s)
			f.secrets[s.Name] = s
		case "PersistentVolumeClaim":
			var c corev1.PersistentVolumeClaim
			strict(&c)
			f.pvcs[c.Name] = c
		case "Service":
			var s corev1.Service
			strict(&s)
			f.services[s.Name] = s
		case "ManagedInferenceJob":
			strict(&v1alpha1.ManagedInferenceJob{})
		case "ModelMaster":
			strict(&v1alpha1.ModelMaster{})
		case "Kustomization":
		default:
			t.Errorf("%s: unexpected kind %q in a job folder", p, tm.Kind)
		}
	}
	return f
}

// TestWorkloadContract checks every VM, Service, Secret and PVC of the four job shapes against
// docs/design.md's workload contract, which the webhook and the xDS server rely on.
func TestWorkloadContract(t *testing.T) {
	for _, tp := range fixtures() {
		files := mustRender(t, tp)
		for i := range tp.Jobs {
			jp := &tp.Jobs[i]
			t.Run(tp.Tenant.Name+"/"+jp.Job.Name, func(t *testing.T) {
				checkJob(t, tp.Tenant.Name, tp.Tenant.Spec.Tier, jp, loadJob(t, files, jp.Job.Name))
			})
		}
	}
}

func checkJob(t *testing.T, tenant, tier string, jp *plan.JobPlan, f jobFolder) {
	job, nt := jp.Job.Name, &jp.NodeType
	nodes, gpus := jp.NodesPerReplica, jp.GPUsPerNode
	multi := nodes > 1
	// Under vLLM's data-parallel launcher every node serves its own ranks; under --nnodes only
	// the head does.
	serving := func(n int32) bool { return n == 0 || jp.DataParallelLocal > 0 }
	runtime := string(jp.Job.Spec.EffectiveRuntime())

	if got, want := len(f.vms), int(jp.Job.Spec.Replicas*nodes); got != want {
		t.Fatalf("%d VMs, want replicas x nodes = %d", got, want)
	}
	if len(f.services) != int(jp.Job.Spec.Replicas) {
		t.Errorf("%d Services, want one per replica (%d)", len(f.services), jp.Job.Spec.Replicas)
	}

	for r := range jp.Job.Spec.Replicas {
		replicaGPUs := 0
		for n := range nodes {
			name := fmt.Sprintf("%s-r%d-n%d", job, r, n)
			vm, ok := f.vms[name]
			if !ok {
				t.Fatalf("VM %s missing", name)
			}
			role := map[bool]string{true: "head", false: "worker"}[n == 0]
			wantLabels := map[string]string{
				"app.kubernetes.io/managed-by": "inferplane",
				"inferplane.io/tenant":         tenant,
				"inferplane.io/job":            job,
				"inferplane.io/replica":        strconv.Itoa(int(r)),
				"inferplane.io/node-rank":      strconv.Itoa(int(n)),
				"inferplane.io/role":           role,
				"inferplane.io/node-type":      nt.Name,
				"inferplane.io/runtime":        runtime,
				"inferplane.io/model-master":   jp.Master.Name,
			}
			if serving(n) {
				wantLabels["inferplane.io/serving"] = "true"
			}
			if tier != "" {
				wantLabels["inferplane.io/tier"] = tier // a billing label (docs/metering.md)
			}
			if !maps.Equal(vm.Labels, wantLabels) {
				t.Errorf("%s labels = %v, want %v", name, vm.Labels, wantLabels)
			}
			tpl := vm.Spec.Template
			if !maps.Equal(tpl.ObjectMeta.Labels, wantLabels) {
				t.Errorf("%s template labels = %v, want %v", name, tpl.ObjectMeta.Labels, wantLabels)
			}
			wantAnn := map[string]string{
				"inferplane.io/serving-port":          "8000",
				"inferplane.io/require-api-key":       strconv.FormatBool(jp.Job.Spec.APIKeyRequired()),
				"inferplane.io/replica-nodes":         strconv.Itoa(int(nodes)),
				"inferplane.io/per-replica-gpu-count": strconv.Itoa(int(jp.Master.Spec.PerReplicaGPUCount)),
				"inferplane.io/model":                 cmp.Or(jp.Job.Spec.Model, jp.Master.Spec.Model),
			}
			if serving(n) {
				wantAnn["inferplane.io/address-mode"] = "pod" // the fixtures' node types set no servingAddress
			}
			if !maps.Equal(tpl.ObjectMeta.Annotations, wantAnn) {
				t.Errorf("%s template annotations = %v, want %v", name, tpl.ObjectMeta.Annotations, wantAnn)
			}
			if vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
				t.Errorf("%s runStrategy = %v, want Always", name, vm.Spec.RunStrategy)
			}

			spec := tpl.Spec
			// GPUs: one entry per GPU, named gpu0.., the node type's device name.
			if len(spec.Domain.Devices.GPUs) != int(gpus) {
				t.Errorf("%s has %d GPUs, want %d", name, len(spec.Domain.Devices.GPUs), gpus)
			}
			for i, g := range spec.Domain.Devices.GPUs {
				if g.Name != "gpu"+strconv.Itoa(i) || g.DeviceName != nt.Spec.GPU.ResourceName {
					t.Errorf("%s gpu %d = %+v", name, i, g)
				}
			}
			replicaGPUs += len(spec.Domain.Devices.GPUs)
			if !maps.Equal(spec.NodeSelector, nt.Selector()) {
				t.Errorf("%s nodeSelector = %v, want %v", name, spec.NodeSelector, nt.Selector())
			}

			// CPU and memory: the node type's, scaled to the VM's share of the node's GPUs.
			wantCPU := uint32(int64(nt.Spec.CPU) * int64(gpus) / int64(nt.Spec.GPU.Count))
			nodeMem := resource.MustParse(nt.Spec.Memory)
			if spec.Domain.CPU == nil || spec.Domain.CPU.Cores != wantCPU {
				t.Errorf("%s CPU = %+v, want %d cores", name, spec.Domain.CPU, wantCPU)
			}
			if g := spec.Domain.Memory.Guest; g == nil || g.Value() != nodeMem.Value()*int64(gpus)/int64(nt.Spec.GPU.Count) {
				t.Errorf("%s guest memory = %v, want %d/%d of %s", name, g, gpus, nt.Spec.GPU.Count, nt.Spec.Memory)
			}

			// Multi-node: one rack, InfiniBand, a secondary network.
			if multi {
				aff := spec.Affinity
				if aff == nil || aff.PodAffinity == nil || len(aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
					t.Fatalf("%s: no required pod affinity", name)
				}
				term := aff.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
				wantSel := map[string]string{"inferplane.io/tenant": tenant, "inferplane.io/job": job, "inferplane.io/replica": strconv.Itoa(int(r))}
				if term.TopologyKey != nt.Rack() || !maps.Equal(term.LabelSelector.MatchLabels, wantSel) {
					t.Errorf("%s affinity term = %+v, want rack %s and %v", name, term, nt.Rack(), wantSel)
				}
				hd := spec.Domain.Devices.HostDevices
				if len(hd) != int(nt.Spec.InfiniBand.Count) || hd[0].Name != "ib0" || hd[0].DeviceName != nt.Spec.InfiniBand.ResourceName {
					t.Errorf("%s hostDevices = %+v", name, hd)
				}
				wantNet := render.DefaultFabricNetwork
				if nt.Spec.InfiniBand.Network != "" {
					wantNet = nt.Spec.InfiniBand.Network
				}
				if len(spec.Networks) != 2 || spec.Networks[1].Multus == nil || spec.Networks[1].Multus.NetworkName != wantNet {
					t.Errorf("%s networks = %+v, want pod + multus %s", name, spec.Networks, wantNet)
				}
			} else if spec.Affinity != nil || len(spec.Domain.Devices.HostDevices) > 0 || len(spec.Networks) != 1 {
				t.Errorf("%s: single-node VM with affinity %v, host devices %v, networks %v", name, spec.Affinity, spec.Domain.Devices.HostDevices, spec.Networks)
			}

			// Readiness on every serving node: GET /health on the serving port.
			if serving(n) {
				p := spec.ReadinessProbe
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.HTTPGet.Port.IntValue() != 8000 {
					t.Errorf("%s readinessProbe = %+v", name, p)
				}
			} else if spec.ReadinessProbe != nil {
				t.Errorf("%s: a --headless worker has a readiness probe", name)
			}
			// The serial console is logged: the inference agent's records are read there.
			if l := spec.Domain.Devices.LogSerialConsole; l == nil || !*l {
				t.Errorf("%s: logSerialConsole = %v, want true", name, l)
			}

			// Volumes: golden disk, cloud-init by Secret, model cache PVC, optional HF token.
			vols := map[string]kubevirtv1.Volume{}
			for _, v := range spec.Volumes {
				vols[v.Name] = v
			}
			wantImage := nt.Spec.GuestImage
			if wantImage == "" {
				wantImage = render.DefaultGuestImage
			}
			if cd := vols["rootdisk"].ContainerDisk; cd == nil || cd.Image != wantImage {
				t.Errorf("%s root disk = %+v, want containerDisk %s", name, cd, wantImage)
			}
			ci := vols["cloudinit"].CloudInitNoCloud
			if ci == nil || ci.UserDataSecretRef == nil || ci.UserData != "" || ci.UserDataBase64 != "" {
				t.Fatalf("%s cloud-init = %+v, want a secretRef and nothing inline", name, ci)
			}
			sec, ok := f.secrets[ci.UserDataSecretRef.Name]
			if !ok {
				t.Fatalf("%s: cloud-init Secret %s not in the folder", name, ci.UserDataSecretRef.Name)
			}
			checkUserData(t, name, tenant, jp, r, n, sec.StringData[render.UserDataKey])
			if multi != (ci.NetworkDataSecretRef != nil && sec.StringData[render.NetworkDataKey] != "") {
				t.Errorf("%s: network data by Secret = %v, want %v", name, ci.NetworkDataSecretRef, multi)
			}
			pvcVol := vols["model-cache"].PersistentVolumeClaim
			if pvcVol == nil {
				t.Fatalf("%s: no model-cache PVC volume", name)
			}
			pvc, ok := f.pvcs[pvcVol.ClaimName]
			if !ok {
				t.Fatalf("%s: PVC %s not in the folder", name, pvcVol.ClaimName)
			}
			if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse(jp.ModelCacheSize)) != 0 {
				t.Errorf("%s cache = %s, want %s", pvc.Name, got.String(), jp.ModelCacheSize)
			}
			if s := vols["hf-token"].Secret; s == nil || s.SecretName != render.DefaultHFTokenSecret || s.Optional == nil || !*s.Optional {
				t.Errorf("%s HF token volume = %+v, want optional Secret %s", name, s, render.DefaultHFTokenSecret)
			}
		}
		if replicaGPUs != int(jp.Master.Spec.PerReplicaGPUCount) {
			t.Errorf("replica %d claims %d GPUs, master says %d", r, replicaGPUs, jp.Master.Spec.PerReplicaGPUCount)
		}

		svc, ok := f.services[fmt.Sprintf("%s-r%d", job, r)]
		if !ok {
			t.Fatalf("Service %s-r%d missing", job, r)
		}
		wantSel := map[string]string{"app.kubernetes.io/managed-by": "inferplane", "inferplane.io/tenant": tenant,
			"inferplane.io/job": job, "inferplane.io/replica": strconv.Itoa(int(r)), "inferplane.io/role": "head"}
		if !maps.Equal(svc.Spec.Selector, wantSel) || svc.Spec.Ports[0].Port != 8000 || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s: selector %v ports %v publishNotReady %v", svc.Name, svc.Spec.Selector, svc.Spec.Ports, svc.Spec.PublishNotReadyAddresses)
		}
		// The port the other nodes reach the head at: vLLM's rendezvous, or its data-parallel
		// handshake.
		var ports []int32
		for _, p := range svc.Spec.Ports[1:] {
			ports = append(ports, p.Port)
		}
		switch wantPorts := map[bool][]int32{true: {render.MasterPort}}[multi]; {
		case jp.DataParallelLocal > 0 && !slices.Equal(ports, []int32{render.DataParallelRPCPort}):
			t.Errorf("Service %s: ports %v beside http, want the data-parallel handshake %d", svc.Name, ports, render.DataParallelRPCPort)
		case jp.DataParallelLocal == 0 && !slices.Equal(ports, wantPorts):
			t.Errorf("Service %s: ports %v beside http, want %v", svc.Name, ports, wantPorts)
		}
	}
}

// checkUserData checks the launcher of one node: the runtime image started with the master's
// args, and vLLM's multi-node launcher flags.
func checkUserData(t *testing.T, vm, tenant string, jp *plan.JobPlan, r, n int32, ud string) {
	t.Helper()
	if !strings.HasPrefix(ud, "#cloud-config\n") {
		t.Errorf("%s: userdata is not a cloud-config", vm)
	}
	// The cloud-config must be valid YAML with the script in it.
	var cc struct {
		WriteFiles []struct{ Path, Content, Permissions string } `json:"write_files"`
		Runcmd     [][]string                                    `json:"runcmd"`
	}
	if err := yaml.UnmarshalStrict([]byte(ud), &cc); err != nil || len(cc.WriteFiles) != 2 {
		t.Fatalf("%s: cloud-config does not parse: %v", vm, err)
	}
	script := cc.WriteFiles[0].Content
	image := jp.Image
	if !strings.Contains(script, "  "+image+" ") && !strings.HasSuffix(script, "  "+image+"\n") {
		t.Errorf("%s: the launcher does not run image %s:\n%s", vm, image, script)
	}
	words := strings.Join(strings.Fields(strings.ReplaceAll(script[strings.Index(script, "exec /usr/local/bin/inferplane agent"):], "\\\n", " ")), " ")
	// The inference agent runs the container as docker run did, with a health check on the
	// nodes that serve only.
	wantAgent := "exec /usr/local/bin/inferplane agent --name inferplane-model-server --health-url http://127.0.0.1:8000/health --all-gpus --ipc host --network host "
	if jp.NodesPerReplica > 1 && jp.DataParallelLocal == 0 && n > 0 {
		wantAgent = strings.Replace(wantAgent, "http://127.0.0.1:8000/health", "''", 1)
	}
	if !strings.HasPrefix(words, wantAgent) {
		t.Errorf("%s: launcher does not start with %q:\n%s", vm, wantAgent, words)
	}
	if jp.Job.Spec.EffectiveRuntime() == v1alpha1.RuntimeVLLM {
		want := "--entrypoint vllm " + image + " serve " + jp.Master.Spec.Model + " " + strings.Join(jp.Args, " ")
		if !strings.Contains(words, want) {
			t.Errorf("%s: launcher lacks %q:\n%s", vm, want, words)
		}
	} else if strings.Contains(words, " serve ") {
		t.Errorf("%s: a Parakeet launcher runs vllm serve", vm)
	}
	if jp.NodesPerReplica > 1 && jp.DataParallelLocal > 0 {
		want := fmt.Sprintf("--data-parallel-address %s-r%d.%s.svc.cluster.local --data-parallel-rpc-port 29550", jp.Job.Name, r, tenant)
		if n > 0 {
			want += fmt.Sprintf(" --data-parallel-start-rank %d", n*jp.DataParallelLocal)
		}
		if !strings.HasSuffix(words, want) {
			t.Errorf("%s: launcher does not end with %q:\n%s", vm, want, words)
		}
		if strings.Contains(words, "--nnodes") || strings.Contains(words, "--headless") {
			t.Errorf("%s: a data-parallel launcher has --nnodes launcher flags", vm)
		}
	} else if jp.NodesPerReplica > 1 {
		want := fmt.Sprintf("--nnodes %d --node-rank %d --master-addr %s-r%d.%s.svc.cluster.local --master-port 29501",
			jp.NodesPerReplica, n, jp.Job.Name, r, tenant)
		if !strings.Contains(words, want) {
			t.Errorf("%s: launcher lacks %q:\n%s", vm, want, words)
		}
		if headless := strings.HasSuffix(words, " --headless"); headless != (n > 0) {
			t.Errorf("%s: --headless = %v, want it on ranks > 0 only", vm, headless)
		}
		for _, e := range []string{`GLOO_SOCKET_IFNAME="$IFACE_NAME"`, `NCCL_SOCKET_IFNAME="$IFACE_NAME"`} {
			if !strings.Contains(script, "--env "+e) {
				t.Errorf("%s: launcher does not pass %s", vm, e)
			}
		}
	} else if strings.Contains(words, "--nnodes") || strings.Contains(words, "--headless") {
		t.Errorf("%s: single-node launcher has multi-node flags", vm)
	}
}

// TestCloudInitUserDataGoesBySecret: KubeVirt caps inline userData at 2048 bytes. The
// launchers are longer than that (the multi-node ones well over), and every one of them is in
// a Secret, whatever its size.
func TestCloudInitUserDataGoesBySecret(t *testing.T) {
	over := 0
	for _, tp := range fixtures() {
		files := mustRender(t, tp)
		for i := range tp.Jobs {
			f := loadJob(t, files, tp.Jobs[i].Job.Name)
			for name, vm := range f.vms {
				for _, v := range vm.Spec.Template.Spec.Volumes {
					if ci := v.CloudInitNoCloud; ci != nil && (ci.UserData != "" || ci.UserDataBase64 != "") {
						t.Errorf("%s: inline userData", name)
					}
				}
				ud := f.secrets[name+"-cloud-init"].StringData[render.UserDataKey]
				if len(ud) > 2048 {
					over++
				}
				if b := files[render.JobDir(tp.Jobs[i].Job.Name)+"/"+strings.TrimPrefix(name, tp.Jobs[i].Job.Name+"-")+"-vm.yaml"]; len(b) == 0 || strings.Contains(string(b), "#cloud-config") {
					t.Errorf("%s: VM file missing or carries the cloud-config", name)
				}
			}
		}
	}
	if over == 0 {
		t.Error("no launcher exceeds 2048 bytes: the test no longer proves the Secret path")
	}
}

// TestLauncherQuoting runs the rendered agent command line through a real bash (with the
// agent replaced by printf) and checks the model server would get every argument and env
// value exactly as written: only $IFACE_NAME expands, nothing else the shell could run.
func TestLauncherQuoting(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("SKIPPED: no bash on PATH to run the launcher's command line")
	}
	tp := rendertest.Acme()
	jp := &tp.Jobs[0]
	tricky := []string{"--chat-template", "{% if x %}'quoted' \"$(touch /tmp/pwned)\" `id`{% endif %}\n line two",
		"--served-model-name", "my model", "--x", "*", "--y", "~", "--z", ""}
	jp.Args = append(jp.Args, tricky...)
	jp.Env = []v1alpha1.EnvVar{{Name: "A", Value: "$HOME and ${IFACE_NAME} and $IFACE_NAME2 'q'"}, {Name: "WANDB_API_KEY", SecretKey: "wandb"}}
	files := mustRender(t, tp)
	ud := loadJob(t, files, jp.Job.Name).secrets["qwen-r0-n0-cloud-init"].StringData[render.UserDataKey]
	var cc struct {
		WriteFiles []struct{ Content string } `json:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(ud), &cc); err != nil {
		t.Fatal(err)
	}
	script := cc.WriteFiles[0].Content
	cmdline := script[strings.Index(script, "exec /usr/local/bin/inferplane agent"):]
	cmdline = strings.Replace(cmdline, "exec /usr/local/bin/inferplane agent", `printf '%s\0'`, 1)

	cmd := exec.Command(bash, "-c", "IFACE_NAME=eth9\n"+cmdline)
	cmd.Env = []string{"HOME=/home/x", "PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	argv := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	want := append([]string{"--entrypoint", "vllm", jp.Image, "serve", jp.Master.Spec.Model}, jp.Args...)
	if got := strings.Join(argv[len(argv)-len(want):], "\x00"); got != strings.Join(want, "\x00") {
		t.Errorf("model server argv =\n%q\nwant\n%q", argv[len(argv)-len(want):], want)
	}
	if !slices.Contains(argv, "A=$HOME and eth9 and $IFACE_NAME2 'q'") {
		t.Errorf("env not passed as written (with $IFACE_NAME expanded): %q", argv)
	}
	// A secret env value is read by the agent in the guest, from the Secret's disk.
	if i := slices.Index(argv, "--secret-env"); i < 0 || argv[i+1] != "WANDB_API_KEY=/run/inferplane/hf-token/wandb" {
		t.Errorf("the secret env is not the agent's --secret-env from the Secret's disk: %q", argv)
	}
}
