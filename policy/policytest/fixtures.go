// Package policytest builds inferplane objects shaped by the workload contract of
// docs/design.md, for tests of the policy, the webhook and the validate command. The objects
// are valid against the real CRD schemas (the webhook's e2e test creates them in a real API
// server), and every rule allows them unchanged; a test breaks one thing at a time.
package policytest

import (
	"fmt"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Node types: eight H100 per node with InfiniBand, four L40S, one L4 (another provider).
func H100() *v1alpha1.NodeType {
	return nodeType("aws.h100", "nvidia.com/GH100_H100_SXM5_80GB", 8, 80, &v1alpha1.NodeInfiniBand{
		ResourceName: "nvidia.com/mlnx_ib_vf", Count: 4, Network: "inferplane-system/ib",
	})
}

func L40S() *v1alpha1.NodeType { return nodeType("aws.l40s", "nvidia.com/AD102GL_L40S", 4, 48, nil) }

func L4() *v1alpha1.NodeType { return nodeType("gcp.l4", "nvidia.com/AD104GL_L4", 1, 24, nil) }

func nodeType(name, resourceName string, count, mem int32, ib *v1alpha1.NodeInfiniBand) *v1alpha1.NodeType {
	return &v1alpha1.NodeType{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindNodeType},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeTypeSpec{
			GPU: v1alpha1.NodeGPU{ResourceName: resourceName, Count: count, MemoryGB: mem},
			CPU: 32, Memory: "256Gi", InfiniBand: ib,
		},
	}
}

// Tenant returns a tenant; allowed nil allows every node type.
func Tenant(name string, allowed []string) *v1alpha1.Tenant {
	return &v1alpha1.Tenant{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindTenant},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.TenantSpec{Tier: "h100-dedicated", AllowedNodeTypes: allowed},
	}
}

// Acme is the tenant most tests use: it may use the aws node types only.
func Acme() *v1alpha1.Tenant { return Tenant("acme", []string{"aws.*"}) }

// Master returns a vLLM master with tensor parallelism equal to its GPU count.
func Master(name string, gpus int32) *v1alpha1.ModelMaster {
	return &v1alpha1.ModelMaster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelMaster},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelTenant: "acme"}},
		Spec: v1alpha1.ModelMasterSpec{
			Runtime: v1alpha1.RuntimeVLLM, Model: "Qwen/Qwen3-32B", Image: v1alpha1.DefaultVLLMImage,
			Args:               []string{"--tensor-parallel-size", strconv.Itoa(int(gpus))},
			TensorParallelSize: gpus, PerReplicaGPUCount: gpus,
		},
	}
}

// DataParallelMaster returns a master of data x expert parallelism over nodes of perNode GPUs:
// one data-parallel rank per GPU, perNode on each node (vLLM's data-parallel launcher).
func DataParallelMaster(name string, nodes, perNode int32) *v1alpha1.ModelMaster {
	m := Master(name, nodes*perNode)
	m.Spec.Args = []string{"--enable-expert-parallel", "--data-parallel-hybrid-lb",
		"--data-parallel-size", strconv.Itoa(int(nodes * perNode)), "--data-parallel-size-local", strconv.Itoa(int(perNode))}
	m.Spec.TensorParallelSize, m.Spec.DataParallelSize = 1, nodes*perNode
	return m
}

// Parakeet returns the one-GPU Parakeet master.
func Parakeet() *v1alpha1.ModelMaster {
	return &v1alpha1.ModelMaster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindModelMaster},
		ObjectMeta: metav1.ObjectMeta{Name: "parakeet", Labels: map[string]string{v1alpha1.LabelTenant: "acme"}},
		Spec: v1alpha1.ModelMasterSpec{
			Runtime: v1alpha1.RuntimeParakeet, Model: v1alpha1.ParakeetModel, PerReplicaGPUCount: 1,
		},
	}
}

// Store holds Acme, the "all" (nil list) and "none" (empty list) tenants, the three node types
// and masters qwen-4 (4 GPUs), qwen-8, deepseek-16 (two H100 nodes), deepseek-32, dep-16 (data
// parallel over two H100 nodes), parakeet.
func Store() *policy.Store {
	s, err := policy.NewStore(Objects()...)
	if err != nil {
		panic(err) // the fixtures are static
	}
	return s
}

// Objects are the policy data of Store, as objects (for a cluster or a manifest tree).
func Objects() []client.Object {
	return []client.Object{
		Acme(), Tenant("all", nil), Tenant("none", []string{}),
		H100(), L40S(), L4(),
		Master("qwen-4", 4), Master("qwen-8", 8), Master("deepseek-16", 16), Master("deepseek-32", 32),
		DataParallelMaster("dep-16", 2, 8), Parakeet(),
	}
}

// Job returns a guarded job of tenant acme that runs master on nodeType.
func Job(name string, master *v1alpha1.ModelMaster, nodeType string) *v1alpha1.ManagedInferenceJob {
	return &v1alpha1.ManagedInferenceJob{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindManagedInferenceJob},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "acme", Labels: map[string]string{
			v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelTenant: "acme",
			v1alpha1.LabelJob: name, v1alpha1.LabelModelMaster: master.Name,
		}},
		Spec: v1alpha1.ManagedInferenceJobSpec{
			Runtime: master.Spec.Runtime, Model: master.Spec.Model,
			Replicas: 1, GPUCount: master.Spec.PerReplicaGPUCount, NodeType: nodeType,
		},
	}
}

// VM returns node rank of replica of job, tenant acme, laid out as the rules require for master
// on nt: labels on the VM and its template, annotations, GPUs, node selector, and for a
// multi-node replica the InfiniBand functions and the rack pod affinity.
func VM(job string, replica, rank int, master *v1alpha1.ModelMaster, nt *v1alpha1.NodeType) *kubevirtv1.VirtualMachine {
	layout, err := policy.ReplicaLayout(master, nt)
	if err != nil {
		panic(err) // a fixture that cannot be laid out is a bug in the test
	}
	role := v1alpha1.RoleWorker
	if rank == 0 {
		role = v1alpha1.RoleHead
	}
	labels := map[string]string{
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelTenant: "acme",
		v1alpha1.LabelJob: job, v1alpha1.LabelReplica: strconv.Itoa(replica),
		v1alpha1.LabelNodeRank: strconv.Itoa(rank), v1alpha1.LabelRole: role,
		v1alpha1.LabelNodeType: nt.Name, v1alpha1.LabelRuntime: string(master.Spec.Runtime),
		v1alpha1.LabelModelMaster: master.Name,
	}
	if layout.Serving(int32(rank)) {
		labels[v1alpha1.LabelServing] = v1alpha1.ServingValue
	}
	var devices kubevirtv1.Devices
	for i := range int(layout.GPUsPerNode) {
		devices.GPUs = append(devices.GPUs, kubevirtv1.GPU{Name: fmt.Sprintf("gpu%d", i), DeviceName: nt.Spec.GPU.ResourceName})
	}
	spec := kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			CPU:     &kubevirtv1.CPU{Cores: uint32(nt.Spec.CPU)},
			Devices: devices,
			Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse(nt.Spec.Memory),
			}},
		},
		NodeSelector: nt.Selector(),
	}
	if layout.Nodes > 1 {
		if ib := nt.Spec.InfiniBand; ib != nil {
			for i := range int(ib.Count) {
				spec.Domain.Devices.HostDevices = append(spec.Domain.Devices.HostDevices,
					kubevirtv1.HostDevice{Name: fmt.Sprintf("ib%d", i), DeviceName: ib.ResourceName})
			}
		}
		spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: nt.Rack(),
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					v1alpha1.LabelTenant: "acme", v1alpha1.LabelJob: job, v1alpha1.LabelReplica: strconv.Itoa(replica),
				}},
			}},
		}}
	}
	tmplLabels := maps.Clone(labels)
	strategy := kubevirtv1.RunStrategyAlways
	return &kubevirtv1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-r%d-n%d", job, replica, rank), Namespace: "acme", Labels: labels},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &strategy,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: tmplLabels, Annotations: map[string]string{
					v1alpha1.AnnotationServingPort:        strconv.Itoa(v1alpha1.ServingPort),
					v1alpha1.AnnotationRequireAPIKey:      "true",
					v1alpha1.AnnotationReplicaNodes:       strconv.Itoa(int(layout.Nodes)),
					v1alpha1.AnnotationPerReplicaGPUCount: strconv.Itoa(int(master.Spec.PerReplicaGPUCount)),
				}},
				Spec: spec,
			},
		},
	}
}

// VMI returns the VirtualMachineInstance KubeVirt would create from VM(...).
func VMI(job string, replica, rank int, master *v1alpha1.ModelMaster, nt *v1alpha1.NodeType) *kubevirtv1.VirtualMachineInstance {
	vm := VM(job, replica, rank, master, nt)
	return &kubevirtv1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.Name, Namespace: vm.Namespace,
			Labels: vm.Spec.Template.ObjectMeta.Labels, Annotations: vm.Spec.Template.ObjectMeta.Annotations,
		},
		Spec: vm.Spec.Template.Spec,
	}
}
