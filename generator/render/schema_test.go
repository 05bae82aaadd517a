package render_test

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/rendertest"
)

var vclusterSchema = sync.OnceValues(func() (*jsonschema.Schema, error) {
	// vCluster v0.36.1's chart/values.schema.json, copied unmodified (testdata/vcluster/PROVENANCE.md).
	const path = "testdata/vcluster/values.schema.json"
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(path, doc); err != nil {
		return nil, err
	}
	return c.Compile(path)
})

// validateValues validates a vcluster.yaml against vCluster's schema.
func validateValues(t *testing.T, values []byte) error {
	t.Helper()
	sch, err := vclusterSchema()
	if err != nil {
		t.Fatalf("compile vCluster schema: %v", err)
	}
	j, err := yaml.YAMLToJSON(values)
	if err != nil {
		t.Fatalf("vcluster.yaml is not YAML: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(inst)
}

func TestVClusterValuesMatchSchema(t *testing.T) {
	for _, tp := range append(fixtures(), rendertest.Many(4, 5)...) {
		files := mustRender(t, tp)
		if err := validateValues(t, files[render.FileVCluster]); err != nil {
			t.Errorf("%s: vcluster.yaml fails vCluster v0.36's schema:\n%v", tp.Tenant.Name, err)
		}
	}
}

// TestVClusterValuesContent checks what the schema cannot: the keys the product needs are
// there, with one application per job, each targeting the tenant cluster.
func TestVClusterValuesContent(t *testing.T) {
	files := mustRender(t, rendertest.Acme())
	var v render.VClusterValues
	if err := yaml.UnmarshalStrict(files[render.FileVCluster], &v); err != nil {
		t.Fatal(err)
	}
	if !v.PrivateNodes.Enabled {
		t.Error("privateNodes.enabled is not true")
	}
	if a := v.Integrations.ArgoCD; a == nil || !a.Enabled || a.Connector != "argocd-main" {
		t.Errorf("integrations.argoCD = %+v, want enabled with connector argocd-main", a)
	}
	if v.Deploy == nil || len(v.Deploy.ArgoCD.Applications) != 3 {
		t.Fatalf("deploy.argoCD.applications: want the add-ons and one per job (3), got %+v", v.Deploy)
	}
	addons := v.Deploy.ArgoCD.Applications[0]
	if addons.Name != "acme-addons" || addons.Target != "vCluster" || addons.Inline == nil || addons.Inline.Source.Path != render.AddonsDir {
		t.Errorf("first application is not the add-ons: %+v", addons)
	}
	for _, app := range v.Deploy.ArgoCD.Applications[1:] {
		if app.Target != "vCluster" || app.Inline == nil || app.Inline.Source.Path != render.JobDir(app.Name) {
			t.Errorf("application %s: target %q, inline %+v", app.Name, app.Target, app.Inline)
		}
	}
	want := map[string]int32{"requests.nvidia.com/gpu": 16, "requests.nvidia.com/GH100_H100_SXM5_80GB": 16}
	if v.Policies == nil || len(v.Policies.ResourceQuota.Quota) != len(want) {
		t.Fatalf("policies.resourceQuota = %+v, want %v", v.Policies, want)
	}
	for k, n := range want {
		if v.Policies.ResourceQuota.Quota[k] != n {
			t.Errorf("quota %s = %d, want %d", k, v.Policies.ResourceQuota.Quota[k], n)
		}
	}

	// A tenant without a GPU quota gets no quota section.
	if bytes.Contains(mustRender(t, rendertest.Globex())[render.FileVCluster], []byte("policies")) {
		t.Error("globex has no GPU quota but its vcluster.yaml sets policies")
	}
}

// TestVClusterSchemaIsStrict shows the validation above can fail, and records what the schema
// really says about each mistake.
func TestVClusterSchemaIsStrict(t *testing.T) {
	base := string(mustRender(t, rendertest.Acme())[render.FileVCluster])
	cases := []struct {
		name     string
		mutate   func(string) string
		rejected bool
		mention  string
	}{
		{"unknown top-level key (the removed isolation: section)",
			func(s string) string { return s + "isolation:\n  enabled: true\n" }, true, "isolation"},
		{"unknown key under privateNodes",
			func(s string) string {
				return strings.Replace(s, "privateNodes:\n  enabled: true", "privateNodes:\n  enabled: true\n  gpus: 8", 1)
			}, true, "gpus"},
		{"unknown key in an application",
			func(s string) string {
				return strings.Replace(s, "target: vCluster", "target: vCluster\n      cluster: x", 1)
			}, true, "cluster"},
		{"privateNodes.enabled not a boolean",
			func(s string) string {
				return strings.Replace(s, "privateNodes:\n  enabled: true", "privateNodes:\n  enabled: yes-please", 1)
			}, true, "enabled"},
		// The schema types target as a plain string: the lowercase "vcluster" some docs show
		// passes the schema, and only vCluster Platform refuses it. The render writes the
		// constant render.TargetVCluster, and TestVClusterValuesContent pins it.
		{"lowercase target vcluster (schema: a plain string)",
			func(s string) string { return strings.ReplaceAll(s, "target: vCluster", "target: vcluster") }, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mutated := c.mutate(base)
			if mutated == base {
				t.Fatal("mutation did not apply")
			}
			err := validateValues(t, []byte(mutated))
			switch {
			case c.rejected && err == nil:
				t.Errorf("schema accepted it")
			case c.rejected && !strings.Contains(err.Error(), c.mention):
				t.Errorf("error does not mention %q: %v", c.mention, err)
			case !c.rejected && err != nil:
				t.Errorf("schema rejected it: %v", err)
			}
		})
	}
}

// TestProjectTypedRoundTrip covers vCluster Platform's Project, for which no CRD is available
// here: the file must decode strictly (no unknown fields) into the typed Project and keep the
// three meanings of allowedNodeTypes apart (absent: all; []: none; a list).
func TestProjectTypedRoundTrip(t *testing.T) {
	all := rendertest.Tenant("open", "shared", nil, 0)
	cases := []struct {
		tenant string
		files  render.Files
		want   *[]string
	}{
		{"acme", mustRender(t, rendertest.Acme()), &[]string{rendertest.H100}},
		{"globex", mustRender(t, rendertest.Globex()), &[]string{"metal3.*"}},
		{"initech", mustRender(t, rendertest.Initech()), &[]string{}},
		{"open", mustRender(t, all), nil},
	}
	for _, c := range cases {
		data := c.files[render.FileProject]
		var p render.Project
		if err := yaml.UnmarshalStrict(data, &p); err != nil {
			t.Fatalf("%s: %v", c.tenant, err)
		}
		if p.APIVersion != "management.loft.sh/v1" || p.Kind != "Project" || p.Metadata.Name != c.tenant {
			t.Errorf("%s: %s %s %s", c.tenant, p.APIVersion, p.Kind, p.Metadata.Name)
		}
		var got *[]string
		if p.Spec.AllowedNodeTypes != nil {
			l := []string{}
			for _, n := range *p.Spec.AllowedNodeTypes {
				l = append(l, n.Name)
			}
			got = &l
		}
		if (got == nil) != (c.want == nil) || got != nil && strings.Join(*got, ",") != strings.Join(*c.want, ",") {
			t.Errorf("%s: allowedNodeTypes = %v, want %v", c.tenant, deref(got), deref(c.want))
		}
		again, err := yaml.Marshal(p)
		if err != nil || !bytes.Equal(again, data) {
			t.Errorf("%s: round trip changed the file:\n%s\nvs\n%s", c.tenant, again, data)
		}
		if c.want == nil && bytes.Contains(data, []byte("allowedNodeTypes")) {
			t.Errorf("%s: allowedNodeTypes must be absent when every node type is allowed:\n%s", c.tenant, data)
		}
	}
}

func deref(p *[]string) any {
	if p == nil {
		return "<absent>"
	}
	return *p
}
