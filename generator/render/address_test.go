package render_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
)

// withAddress sets a servingAddress on every job's node type (nodeTypes) or on the tenant.
func withAddress(tp plan.TenantPlan, a *v1alpha1.ServingAddress, onTenant bool) plan.TenantPlan {
	if onTenant {
		tp.Tenant.Spec.ServingAddress = a
		return tp
	}
	for i := range tp.Jobs {
		tp.Jobs[i].NodeType.Spec.ServingAddress = a
	}
	for i := range tp.NodeTypes {
		tp.NodeTypes[i].Spec.ServingAddress = a
	}
	return tp
}

// The address modes of docs/design.md's workload contract, as the generator renders them.
func TestServingAddressModes(t *testing.T) {
	t.Run("Network on its own interface", func(t *testing.T) {
		tp := withAddress(rendertest.Globex(), &v1alpha1.ServingAddress{Mode: v1alpha1.AddressNetwork, Network: "dc/serving"}, false)
		f := loadJob(t, mustRender(t, tp), "llama")
		vm := f.vms["llama-r0-n0"]
		tpl := vm.Spec.Template
		if a := tpl.ObjectMeta.Annotations; a[v1alpha1.AnnotationAddressMode] != "network" || a[v1alpha1.AnnotationAddressNetwork] != "serving" {
			t.Errorf("annotations %v", a)
		}
		nets := tpl.Spec.Networks
		if len(nets) != 2 || nets[1].Name != "serving" || nets[1].Multus == nil || nets[1].Multus.NetworkName != "dc/serving" {
			t.Errorf("networks %+v", nets)
		}
		ifs := tpl.Spec.Domain.Devices.Interfaces
		if len(ifs) != 2 || ifs[1].Name != "serving" || ifs[1].Bridge == nil {
			t.Errorf("interfaces %+v", ifs)
		}
		if f.secrets["llama-r0-n0-cloud-init"].StringData[render.NetworkDataKey] == "" {
			t.Error("the guest needs network data to bring up its second NIC")
		}
	})
	t.Run("Network on the fabric of a multi-node replica", func(t *testing.T) {
		tp := withAddress(rendertest.Globex(), &v1alpha1.ServingAddress{Mode: v1alpha1.AddressNetwork, Network: render.DefaultFabricNetwork}, false)
		f := loadJob(t, mustRender(t, tp), "kimi")
		head, worker := f.vms["kimi-r0-n0"].Spec.Template, f.vms["kimi-r0-n1"].Spec.Template
		if head.ObjectMeta.Annotations[v1alpha1.AnnotationAddressNetwork] != "fabric" || len(head.Spec.Networks) != 2 {
			t.Errorf("head: %v %+v", head.ObjectMeta.Annotations, head.Spec.Networks)
		}
		if _, ok := worker.ObjectMeta.Annotations[v1alpha1.AnnotationAddressMode]; ok {
			t.Errorf("a worker does not serve: %v", worker.ObjectMeta.Annotations)
		}
	})
	for _, onTenant := range []bool{false, true} {
		t.Run("LoadBalancer", func(t *testing.T) {
			a := &v1alpha1.ServingAddress{Mode: v1alpha1.AddressLoadBalancer, LoadBalancerClass: "example.com/internal",
				SourceRanges: []string{"10.1.0.0/16"}, ServiceAnnotations: map[string]string{"metallb.universe.tf/address-pool": "serving"}}
			files := mustRender(t, withAddress(rendertest.Globex(), a, onTenant))
			f := loadJob(t, files, "kimi")
			if got := f.vms["kimi-r0-n0"].Spec.Template.ObjectMeta.Annotations; got[v1alpha1.AnnotationAddressMode] != "loadbalancer" ||
				got[v1alpha1.AnnotationAddressService] != "kimi-r0-n0" {
				t.Errorf("annotations %v", got)
			}
			svc, ok := f.services["kimi-r0-n0"]
			if !ok {
				t.Fatalf("no LoadBalancer Service for the serving node; services %v", keys(f.services))
			}
			if _, ok := f.services["kimi-r0-n1"]; ok {
				t.Error("a worker got a LoadBalancer Service")
			}
			s := svc.Spec
			if s.Type != corev1.ServiceTypeLoadBalancer || s.LoadBalancerClass == nil || *s.LoadBalancerClass != "example.com/internal" ||
				len(s.LoadBalancerSourceRanges) != 1 || s.Selector[v1alpha1.LabelNodeRank] != "0" || s.Selector[v1alpha1.LabelReplica] != "0" ||
				len(s.Ports) != 1 || s.Ports[0].Port != 8000 || svc.Annotations["metallb.universe.tf/address-pool"] != "serving" {
				t.Errorf("service %+v", svc)
			}
			var k struct{ Resources []string }
			_ = yaml.Unmarshal(files[render.JobDir("kimi")+"/kustomization.yaml"], &k)
			if !strings.Contains(strings.Join(k.Resources, " "), "r0-n0-loadbalancer.yaml") {
				t.Errorf("kustomization does not list the Service: %v", k.Resources)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A wrong servingAddress is an error naming the file and the field; nothing is rendered.
func TestServingAddressErrors(t *testing.T) {
	for _, tc := range []struct {
		a        v1alpha1.ServingAddress
		onTenant bool
		want     string
	}{
		{v1alpha1.ServingAddress{Mode: "Ingress"}, false, `tenants/nodetypes/metal3.gpu-h200.yaml: spec.servingAddress.mode`},
		{v1alpha1.ServingAddress{Mode: v1alpha1.AddressNetwork}, true, `tenants/globex/tenant.yaml: spec.servingAddress.network`},
		{v1alpha1.ServingAddress{Mode: v1alpha1.AddressNetwork, Network: "Bad_Name"}, false, `spec.servingAddress.network`},
		{v1alpha1.ServingAddress{Mode: v1alpha1.AddressPod, Network: "x"}, false, `spec.servingAddress.network`},
		{v1alpha1.ServingAddress{Mode: v1alpha1.AddressPod, LoadBalancerClass: "x"}, false, `spec.servingAddress.mode`},
		{v1alpha1.ServingAddress{Mode: v1alpha1.AddressLoadBalancer, SourceRanges: []string{"10.0.0.1"}}, false, `spec.servingAddress.sourceRanges`},
		{v1alpha1.ServingAddress{Mode: v1alpha1.AddressLoadBalancer, ServiceAnnotations: map[string]string{"a b": "c"}}, false, `spec.servingAddress.serviceAnnotations`},
	} {
		_, err := render.Tenant(withAddress(rendertest.Globex(), &tc.a, tc.onTenant), render.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to name %q", tc.a, err, tc.want)
		}
	}
}

// The objects of the Network and LoadBalancer modes pass the real API server's strict
// dry-run (the KubeVirt CRDs' schema for the extra interface, core's for the Service).
func TestServingAddressObjectsPassStrictDryRun(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, a := range []*v1alpha1.ServingAddress{
		{Mode: v1alpha1.AddressNetwork, Network: "dc/serving"},
		{Mode: v1alpha1.AddressLoadBalancer, LoadBalancerClass: "example.com/internal", SourceRanges: []string{"10.1.0.0/16"},
			ServiceAnnotations: map[string]string{"metallb.universe.tf/address-pool": "serving"}},
	} {
		files := mustRender(t, withAddress(rendertest.Globex(), a, false))
		for _, p := range slices.Sorted(maps.Keys(files)) {
			if !strings.HasPrefix(p, "jobs/") || !isKubeObjectFile(p) {
				continue
			}
			objs, err := manifest.Decode(files[p])
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			for _, u := range objs {
				if err := env.DryRun(ctx, u); err != nil {
					t.Errorf("%s (%s): %s rejected: %v", p, a.Mode, kubeenv.Describe(u), err)
				}
			}
		}
	}
}
