package policy

import (
	"fmt"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// Layout is how one replica spreads over the nodes of a node type.
type Layout struct {
	// Nodes is the number of VMs (one per node) of one replica.
	Nodes int32
	// GPUsPerNode is the number of GPUs each of those VMs passes through.
	GPUsPerNode int32
	// DataParallelLocal is set when a multi-node replica starts with vLLM's data-parallel
	// launcher (its args ask for data parallelism): every node runs this many data-parallel
	// ranks of its own and answers requests for them. Zero under the --nnodes launcher, whose
	// workers run --headless, and on one node.
	DataParallelLocal int32
}

// Serving reports whether node rank of a replica answers HTTP: the head always; every node
// under the data-parallel launcher.
func (l Layout) Serving(rank int32) bool { return rank == 0 || l.DataParallelLocal > 0 }

// ReplicaLayout is the layout the rules require for one replica of master on nodes of type nt:
// one VM with all perReplicaGPUCount GPUs when they fit one node, else perReplicaGPUCount / GPUs
// per node VMs of a whole node each. It is an error when the count is not a whole number of
// nodes, when a Parakeet replica would need more than one node, or when a multi-node master
// asks for data parallelism whose ranks do not fill each node (--data-parallel-size-local x
// tensor x pipeline must be the node's GPUs). The generator lays out replicas with it, so
// what it renders is what the webhook admits.
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
	l := Layout{Nodes: want / perNode, GPUsPerNode: perNode}
	par := masterParallelism(master)
	if par.DP <= 1 {
		return l, nil
	}
	tp, pp := max(par.TP, 1), max(par.PP, 1)
	if local := int64(perNode) / (tp * pp); par.DPLocal*tp*pp != int64(perNode) || par.DP != par.DPLocal*int64(l.Nodes) {
		return Layout{}, fmt.Errorf("ModelMaster %s spans %d nodes of NodeType %s with data parallelism: each node runs "+
			"%s data-parallel ranks of tensor %d x pipeline %d GPUs, which must fill its %s: %s %d and %s %d (the master has %s and %s)",
			master.Name, l.Nodes, nt.Name, vllmargs.DataParallelSizeLocal, tp, pp, gpus(perNode), vllmargs.DataParallelSizeLocal, local,
			vllmargs.DataParallelSize, local*int64(l.Nodes), sizeText(vllmargs.DataParallelSizeLocal, par.DPLocal), sizeText(vllmargs.DataParallelSize, par.DP))
	}
	l.DataParallelLocal = int32(par.DPLocal)
	return l, nil
}

func sizeText(flag string, n int64) string {
	if n < 1 {
		return "no " + flag
	}
	return fmt.Sprintf("%s %d", flag, n)
}

// gpus says "1 GPU" or "n GPUs".
func gpus[T ~int32 | ~int](n T) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}
