package render

import (
	"cmp"
	"maps"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/types"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Ports and names inside a job's VMs.
const (
	// MasterPort is vLLM's torch.distributed rendezvous port on the head of a multi-node
	// replica (vLLM's own default, spelled out on the command line and the Service).
	MasterPort = 29501
	// DataParallelRPCPort is vLLM's data-parallel handshake port on the head of a replica
	// started with the data-parallel launcher (vLLM's own default, spelled out likewise).
	DataParallelRPCPort = 29550
	// HealthPath is the model server's health endpoint, probed on every serving node.
	HealthPath = "/health"

	// Volume and disk names of a VM.
	volRoot      = "rootdisk"
	volCloudInit = "cloudinit"
	volCache     = "model-cache"
	volHFToken   = "hf-token"
	// The guest finds the cache disk by its serial (/dev/disk/by-id/virtio-model-cache) and
	// the token disk by its volume label.
	cacheSerial  = "model-cache"
	hfTokenLabel = "hftoken"

	netPod    = "default"
	netFabric = "fabric"
)

// file is one file of a job folder.
type file struct {
	name string
	obj  any
}

// jobFiles are the files of jobs/<job>/: the job and its master, then per replica its Service
// and per node its cloud-init Secret, model-cache PVC and VirtualMachine; kustomization.yaml
// lists them all.
func jobFiles(t *tenant, j *job) []file {
	files := []file{
		{JobFile, managedJob(t, j)},
		{"modelmaster.yaml", modelMaster(t, j)},
	}
	// The launcher is the same on every node that serves, and on every one that does not.
	var heads [2]string
	heads[1] = launcherHead(t, j, true)
	for r := range j.replicas {
		prefix := "r" + strconv.Itoa(int(r))
		files = append(files, file{prefix + "-service.yaml", service(t, j, r)})
		for n := range j.nodes {
			np := prefix + "-n" + strconv.Itoa(int(n))
			// One label map for all objects of a node: built objects are never modified.
			labels := t.nodeLabels(j, r, n)
			serving := j.serving(n)
			if !serving && heads[0] == "" {
				heads[0] = launcherHead(t, j, false)
			}
			files = append(files,
				file{np + "-cloud-init.yaml", cloudInitSecret(t, j, r, n, labels, heads[b2i(serving)])},
				file{np + "-model-cache.yaml", modelCache(t, j, r, n, labels)},
				file{np + "-vm.yaml", virtualMachine(t, j, r, n, labels)},
			)
			if serving && j.address.mode() == v1alpha1.AddressLoadBalancer {
				files = append(files, file{np + "-loadbalancer.yaml", loadBalancer(t, j, r, n, labels)})
			}
		}
	}
	k := types.Kustomization{TypeMeta: types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind}}
	for _, f := range files {
		k.Resources = append(k.Resources, f.name)
	}
	return append([]file{{"kustomization.yaml", k}}, files...)
}

// managedJob is the job as written, in the tenant's namespace, labelled with its master so
// the webhook checks it against the master the generator chose.
func managedJob(t *tenant, j *job) object[v1alpha1.ManagedInferenceJobSpec] {
	l := maps.Clone(j.p.Job.Labels)
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, t.jobLabels(j))
	l[v1alpha1.LabelModelMaster] = j.master
	l[v1alpha1.LabelNodeType] = j.nodeType.Name
	l[v1alpha1.LabelRuntime] = string(j.runtime)
	return object[v1alpha1.ManagedInferenceJobSpec]{
		APIVersion: v1alpha1.APIVersion,
		Kind:       v1alpha1.KindManagedInferenceJob,
		Metadata:   meta{Name: j.name, Namespace: t.namespace, Labels: l, Annotations: maps.Clone(j.p.Job.Annotations)},
		Spec:       j.p.Job.Spec,
	}
}

// modelMaster is the job's master. It is cluster-scoped, so it carries no job label, and it
// syncs one wave early so that it exists when the webhook checks the job and its VMs.
func modelMaster(t *tenant, j *job) object[v1alpha1.ModelMasterSpec] {
	return object[v1alpha1.ModelMasterSpec]{
		APIVersion: v1alpha1.APIVersion,
		Kind:       v1alpha1.KindModelMaster,
		Metadata: meta{
			Name:        j.master,
			Labels:      maps.Clone(t.labels),
			Annotations: map[string]string{SyncWaveAnnotation: "-1"},
		},
		Spec: j.p.Master.Spec,
	}
}

// service is a replica's Service for its head node: the address the other nodes reach it at
// (vLLM's rendezvous, or its data-parallel handshake). It is headless and publishes addresses
// before they are ready: a multi-node head is not ready until its workers have joined it
// through this very name, so a Service that waited for readiness would never let them in.
func service(t *tenant, j *job, r int32) object[corev1.ServiceSpec] {
	sel := t.replicaLabels(j, r)
	sel[v1alpha1.LabelRole] = v1alpha1.RoleHead
	ports := []corev1.ServicePort{{
		Name: "http", Protocol: corev1.ProtocolTCP, Port: v1alpha1.ServingPort,
		TargetPort: intstr.FromInt32(v1alpha1.ServingPort),
	}}
	switch {
	case j.multiNode() && j.dpLocal > 0:
		ports = append(ports, corev1.ServicePort{
			Name: "dp-rpc", Protocol: corev1.ProtocolTCP, Port: DataParallelRPCPort,
			TargetPort: intstr.FromInt32(DataParallelRPCPort),
		})
	case j.multiNode():
		ports = append(ports, corev1.ServicePort{
			Name: "rendezvous", Protocol: corev1.ProtocolTCP, Port: MasterPort,
			TargetPort: intstr.FromInt32(MasterPort),
		})
	}
	return object[corev1.ServiceSpec]{
		APIVersion: "v1",
		Kind:       "Service",
		Metadata:   meta{Name: serviceName(j.name, r), Namespace: t.namespace, Labels: t.withTier(t.replicaLabels(j, r))},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 sel,
			Ports:                    ports,
			PublishNotReadyAddresses: true,
		},
	}
}

// headAddress is the DNS name workers of a multi-node replica dial to reach its head.
func headAddress(t *tenant, j *job, r int32) string {
	return serviceName(j.name, r) + "." + t.namespace + ".svc." + t.opts.ClusterDomain
}

// modelCache is a node's model-weight cache. It is its own object, not a VM data volume
// template, so a VM restart (a new VMI) finds the weights it downloaded before.
func modelCache(t *tenant, j *job, r, n int32, labels map[string]string) object[corev1.PersistentVolumeClaimSpec] {
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: j.cache},
		},
	}
	if t.opts.StorageClass != "" {
		sc := t.opts.StorageClass
		spec.StorageClassName = &sc
	}
	return object[corev1.PersistentVolumeClaimSpec]{
		APIVersion: "v1",
		Kind:       "PersistentVolumeClaim",
		Metadata:   meta{Name: modelCacheName(policy.VMName(j.name, r, n)), Namespace: t.namespace, Labels: labels},
		Spec:       spec,
	}
}

// secret is a Secret; its own struct because Secrets have no spec.
type secret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   meta              `json:"metadata"`
	Type       corev1.SecretType `json:"type"`
	StringData map[string]string `json:"stringData"`
}

// Keys KubeVirt reads from a cloud-init NoCloud secret.
const (
	UserDataKey    = "userdata"
	NetworkDataKey = "networkdata"
)

// cloudInitSecret holds a node's cloud-init: bootstrap, never a credential. KubeVirt caps
// inline userData at 2048 bytes; a Secret has no such limit, and keeps the VM spec small.
func cloudInitSecret(t *tenant, j *job, r, n int32, labels map[string]string, head string) secret {
	data := map[string]string{UserDataKey: userData(t, j, r, n, head)}
	if j.secondaryNIC() {
		data[NetworkDataKey] = networkData
	}
	return secret{
		APIVersion: "v1",
		Kind:       "Secret",
		Metadata:   meta{Name: cloudInitName(policy.VMName(j.name, r, n)), Namespace: t.namespace, Labels: labels},
		Type:       corev1.SecretTypeOpaque,
		StringData: data,
	}
}

// vmSpec is kubevirtv1.VirtualMachineSpec with a template whose metadata is ours (see object).
type vmSpec struct {
	RunStrategy kubevirtv1.VirtualMachineRunStrategy `json:"runStrategy"`
	Template    vmTemplate                           `json:"template"`
}

type vmTemplate struct {
	Metadata meta                                  `json:"metadata"`
	Spec     kubevirtv1.VirtualMachineInstanceSpec `json:"spec"`
}

// virtualMachine is one node of a replica. A VirtualMachine rather than a bare VMI: a VMI's
// spec cannot change after creation, Argo CD reports a loading VMI as Degraded, and a VM
// (runStrategy Always) restarts its VMI and keeps its volumes.
func virtualMachine(t *tenant, j *job, r, n int32, labels map[string]string) object[vmSpec] {
	name := policy.VMName(j.name, r, n)
	nt := j.nodeType

	gpus := make([]kubevirtv1.GPU, j.gpusPerNode)
	for i := range gpus {
		gpus[i] = kubevirtv1.GPU{Name: deviceName("gpu", i), DeviceName: nt.Spec.GPU.ResourceName}
	}
	disks, volumes := vmStorage(t, j, name)
	ifaces, networks := vmNetworks(j)
	var hostDevices []kubevirtv1.HostDevice
	var affinity *corev1.Affinity
	if j.multiNode() {
		// GPU-to-GPU traffic (NCCL) between the nodes of a replica: InfiniBand functions passed
		// through, and a secondary network (vmNetworks) that gives each guest an address its
		// peers can reach (masquerade on the pod network hides it).
		if ib := nt.Spec.InfiniBand; ib != nil {
			for i := range ib.Count {
				hostDevices = append(hostDevices, kubevirtv1.HostDevice{Name: deviceName("ib", int(i)), DeviceName: ib.ResourceName})
			}
		}
		affinity = rackAffinity(t, j, r)
	}

	mem := j.memory
	eviction := kubevirtv1.EvictionStrategyNone
	// The guest's serial console goes to virt-launcher's guest-console-log container: the
	// inference agent's records (docs/agent.md) are read back as that container's log.
	logSerialConsole := true
	spec := kubevirtv1.VirtualMachineInstanceSpec{
		Domain: kubevirtv1.DomainSpec{
			CPU:    &kubevirtv1.CPU{Cores: j.cpu},
			Memory: &kubevirtv1.Memory{Guest: &mem},
			// Requests equal to the guest memory: no overcommit under a model server.
			Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: mem}},
			Devices: kubevirtv1.Devices{
				GPUs:             gpus,
				HostDevices:      hostDevices,
				Disks:            disks,
				Interfaces:       ifaces,
				LogSerialConsole: &logSerialConsole,
			},
		},
		NodeSelector: maps.Clone(nt.Selector()),
		Affinity:     affinity,
		// A VM with passed-through GPUs cannot live-migrate: on a node drain it stops, and
		// runStrategy Always starts it again elsewhere with its model cache.
		EvictionStrategy: &eviction,
		Hostname:         name,
		Networks:         networks,
		Volumes:          volumes,
	}
	if j.serving(n) {
		spec.ReadinessProbe = readinessProbe()
	}

	annotations := map[string]string{
		v1alpha1.AnnotationServingPort:        strconv.Itoa(v1alpha1.ServingPort),
		v1alpha1.AnnotationRequireAPIKey:      strconv.FormatBool(j.requireAPIKey),
		v1alpha1.AnnotationReplicaNodes:       strconv.Itoa(int(j.nodes)),
		v1alpha1.AnnotationPerReplicaGPUCount: strconv.Itoa(int(j.nodes * j.gpusPerNode)),
		// The model as the customer named it, for the meter's records (a billing label).
		v1alpha1.AnnotationModel: cmp.Or(j.p.Job.Spec.Model, j.p.Master.Spec.Model),
	}
	addressAnnotations(j, name, n, annotations)
	return object[vmSpec]{
		APIVersion: kubevirtv1.SchemeGroupVersion.String(),
		Kind:       "VirtualMachine",
		Metadata:   meta{Name: name, Namespace: t.namespace, Labels: labels},
		Spec: vmSpec{
			RunStrategy: kubevirtv1.RunStrategyAlways,
			Template:    vmTemplate{Metadata: meta{Labels: labels, Annotations: annotations}, Spec: spec},
		},
	}
}

// vmStorage is a node's disks and their volumes: the golden root disk, cloud-init, the model
// cache claim and the (optional) Hugging Face token.
func vmStorage(t *tenant, j *job, name string) ([]kubevirtv1.Disk, []kubevirtv1.Volume) {
	disks := []kubevirtv1.Disk{
		virtioDisk(volRoot, ""),
		virtioDisk(volCloudInit, ""),
		virtioDisk(volCache, cacheSerial),
		virtioDisk(volHFToken, ""),
	}
	optional := true
	volumes := []kubevirtv1.Volume{
		{Name: volRoot, VolumeSource: kubevirtv1.VolumeSource{
			ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: j.guestImage},
		}},
		{Name: volCloudInit, VolumeSource: kubevirtv1.VolumeSource{
			CloudInitNoCloud: cloudInitSource(name, j.secondaryNIC()),
		}},
		{Name: volCache, VolumeSource: kubevirtv1.VolumeSource{
			PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: modelCacheName(name)},
			},
		}},
		{Name: volHFToken, VolumeSource: kubevirtv1.VolumeSource{
			Secret: &kubevirtv1.SecretVolumeSource{SecretName: t.opts.HFTokenSecret, Optional: &optional, VolumeLabel: hfTokenLabel},
		}},
	}
	return disks, volumes
}

// vmNetworks is a node's interfaces: the pod network for the API (and, multi-node, the
// rendezvous with the head), plus, multi-node, the fabric network between the replica's nodes.
func vmNetworks(j *job) ([]kubevirtv1.Interface, []kubevirtv1.Network) {
	// Masquerade forwards the declared ports only; a multi-node node declares none, so every
	// port vLLM's launcher opens on the head is reachable.
	pod := kubevirtv1.Interface{Name: netPod, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{
		Masquerade: &kubevirtv1.InterfaceMasquerade{},
	}}
	if !j.multiNode() {
		pod.Ports = []kubevirtv1.Port{{Name: "http", Protocol: "TCP", Port: v1alpha1.ServingPort}}
	}
	ifaces := []kubevirtv1.Interface{pod}
	networks := []kubevirtv1.Network{{Name: netPod, NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}}
	if j.multiNode() {
		ifaces = append(ifaces, kubevirtv1.Interface{Name: netFabric, InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{
			Bridge: &kubevirtv1.InterfaceBridge{},
		}})
		networks = append(networks, kubevirtv1.Network{Name: netFabric, NetworkSource: kubevirtv1.NetworkSource{
			Multus: &kubevirtv1.MultusNetwork{NetworkName: j.fabric},
		}})
	}
	if itf, nw := servingInterface(j); itf != nil {
		// Address mode Network: the gateway reaches the model server on the serving network,
		// after the fabric (NCCL's is the second NIC).
		ifaces = append(ifaces, *itf)
		networks = append(networks, *nw)
	}
	return ifaces, networks
}

// rackAffinity keeps all nodes of a replica in one rack: each node's pod must land in the rack
// of the replica's other pods (the first one placed picks the rack).
func rackAffinity(t *tenant, j *job, r int32) *corev1.Affinity {
	sel := t.replicaLabels(j, r)
	delete(sel, v1alpha1.LabelManagedBy)
	return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: sel},
			TopologyKey:   j.nodeType.Rack(),
		}},
	}}
}

// readinessProbe is the head node's: loading weights takes minutes, and readiness only gates
// traffic, it never restarts.
func readinessProbe() *kubevirtv1.Probe {
	return &kubevirtv1.Probe{
		Handler: kubevirtv1.Handler{HTTPGet: &corev1.HTTPGetAction{
			Path: HealthPath, Port: intstr.FromInt32(v1alpha1.ServingPort),
		}},
		InitialDelaySeconds: 60,
		PeriodSeconds:       10,
		TimeoutSeconds:      5,
		FailureThreshold:    3,
	}
}

// deviceNames holds gpu0..gpu15 and ib0..ib15, the names nearly every VM uses.
var deviceNames = func() map[string][]string {
	m := map[string][]string{}
	for _, p := range []string{"gpu", "ib"} {
		for i := range 16 {
			m[p] = append(m[p], p+strconv.Itoa(i))
		}
	}
	return m
}()

// deviceName is prefix + i ("gpu0", "ib3").
func deviceName(prefix string, i int) string {
	if names := deviceNames[prefix]; i < len(names) {
		return names[i]
	}
	return prefix + strconv.Itoa(i)
}

func virtioDisk(name, serial string) kubevirtv1.Disk {
	return kubevirtv1.Disk{Name: name, Serial: serial, DiskDevice: kubevirtv1.DiskDevice{
		Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio},
	}}
}

func cloudInitSource(vm string, withNetwork bool) *kubevirtv1.CloudInitNoCloudSource {
	ref := &corev1.LocalObjectReference{Name: cloudInitName(vm)}
	s := &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: ref}
	if withNetwork {
		s.NetworkDataSecretRef = ref
	}
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
