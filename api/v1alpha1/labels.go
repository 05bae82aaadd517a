package v1alpha1

// Labels and annotations the generator puts on every workload object it renders. The webhook
// uses them to find what it guards (objects without LabelTenant pass untouched) and the xDS
// server uses them to group VMIs into replicas of a job.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "inferplane"

	LabelTenant      = "inferplane.io/tenant"
	LabelJob         = "inferplane.io/job"
	LabelReplica     = "inferplane.io/replica"
	LabelNodeRank    = "inferplane.io/node-rank"
	LabelRole        = "inferplane.io/role"
	LabelNodeType    = "inferplane.io/node-type"
	LabelRuntime     = "inferplane.io/runtime"
	LabelModelMaster = "inferplane.io/model-master"
	// LabelTier is the tenant's tier (spec.tier) on its workload objects, a billing label
	// the meter reads from each VMI.
	LabelTier = "inferplane.io/tier"

	// LabelServing is ServingValue on every node of a replica that answers HTTP: the head of
	// a replica started with vLLM's --nnodes launcher (its workers run --headless), every node
	// of one started with the data-parallel launcher (each serves its own ranks). The xDS
	// server routes to each serving node; the webhook holds the label to the layout.
	LabelServing = "inferplane.io/serving"
	ServingValue = "true"

	// RoleHead is the node of a replica that runs the API server and answers requests;
	// RoleWorker nodes only add their GPUs to it (multi-node replicas).
	RoleHead   = "head"
	RoleWorker = "worker"

	// AnnotationServingPort is the port the head node's model server listens on.
	AnnotationServingPort = "inferplane.io/serving-port"
	// AnnotationRequireAPIKey is "true" or "false": whether Envoy checks API keys for the job.
	AnnotationRequireAPIKey = "inferplane.io/require-api-key"
	// AnnotationReplicaNodes is the number of nodes one replica spans.
	AnnotationReplicaNodes = "inferplane.io/replica-nodes"
	// AnnotationPerReplicaGPUCount mirrors the master's perReplicaGPUCount on each VM.
	AnnotationPerReplicaGPUCount = "inferplane.io/per-replica-gpu-count"
	// AnnotationModel is the job's model as the job names it (spec.model: a recipe's model
	// id such as Qwen/Qwen3-32B, or a master's name), a billing label the meter reads. It is
	// an annotation because a model id holds a slash, which a label value may not.
	AnnotationModel = "inferplane.io/model"

	// AnnotationAddressMode says where the gateway reaches a serving node: "pod" (the pod
	// network's IP; absent means pod), "network" (the IP of the interface named by
	// AnnotationAddressNetwork) or "loadbalancer" (the ingress IP of the Service named by
	// AnnotationAddressService, in the VM's namespace).
	AnnotationAddressMode    = "inferplane.io/address-mode"
	AnnotationAddressNetwork = "inferplane.io/address-network"
	AnnotationAddressService = "inferplane.io/address-service"
	AddressModePod           = "pod"
	AddressModeNetwork       = "network"
	AddressModeLoadBalancer  = "loadbalancer"

	// DefaultNodeTypeLabel is the node label that names a node's NodeType when a NodeType
	// sets no nodeSelector of its own.
	DefaultNodeTypeLabel = "inferplane.io/node-type"
	// DefaultRackLabel is the node label that names a node's rack when a NodeType sets none.
	DefaultRackLabel = "topology.inferplane.io/rack"
)
