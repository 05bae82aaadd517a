package policy

import (
	"fmt"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Layout is how one replica spreads over the nodes of a node type.
type Layout struct {
	// Nodes is the number of VMs (one per node) of one replica.
	Nodes int32
	// GPUsPerNode is the number of GPUs each of those VMs passes through.
	GPUsPerNode int32
}

// ReplicaLayout is the layout the rules require for one replica of master on nodes of type nt:
// one VM with all perReplicaGPUCount GPUs when they fit one node, else perReplicaGPUCount / GPUs
// per node VMs of a whole node each. It is an error when the count is not a whole number of
// nodes, or when a Parakeet replica would need more than one node. The generator lays out
// replicas with it, so what it renders is what the webhook admits.
func ReplicaLayout(master *v1alpha1.ModelMaster, nt *v1alpha1.NodeType) (Layout, error) {
	want, perNode := master.Spec.PerReplicaGPUCount, nt.Spec.GPU.Count
	switch {
	case want < 1:
		return Layout{}, fmt.Errorf("ModelMaster %s has perReplicaGPUCount %d, must be at least 1", master.Name, want)
	case perNode < 1:
		return Layout{}, fmt.Errorf("NodeType %s has spec.gpu.count %d, must be at least 1", nt.Name, perNode)
	case want <= perNode:
		return Layout{Nodes: 1, GPUsPerNode: want}, nil
	case master.Spec.Runtime == v1alpha1.RuntimeParakeet:
		return Layout{}, fmt.Errorf("a Parakeet replica runs on one node, but perReplicaGPUCount %d of ModelMaster %s "+
			"exceeds the %s per node of NodeType %s", want, master.Name, gpus(perNode), nt.Name)
	case want%perNode != 0:
		return Layout{}, fmt.Errorf("perReplicaGPUCount %d of ModelMaster %s is more than one node of NodeType %s holds "+
			"(%s) and not a whole number of such nodes: a multi-node replica takes whole nodes", want, master.Name, nt.Name, gpus(perNode))
	}
	return Layout{Nodes: want / perNode, GPUsPerNode: perNode}, nil
}

// gpus says "1 GPU" or "n GPUs".
func gpus[T ~int32 | ~int](n T) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}
