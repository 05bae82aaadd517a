package fastyaml_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/generator/render/internal/fastyaml"
	"github.com/inferplane/inferplane/generator/render/rendertest"
	"github.com/inferplane/inferplane/internal/manifest"
)

// same checks FromJSON against sigs.k8s.io/yaml.JSONToYAML for one JSON document.
func same(t testing.TB, j []byte) {
	t.Helper()
	want, wantErr := yaml.JSONToYAML(j)
	got, gotErr := fastyaml.FromJSON(j)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("errors differ for %s: fastyaml %v, sigs.k8s.io/yaml %v", j, gotErr, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("output differs for %s:\n--- fastyaml\n%s\n--- sigs.k8s.io/yaml\n%s", j, got, want)
	}
}

func jsonOf(t testing.TB, v any) []byte {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestFastPathCoversRenderedTrees: every document of the fixture tenants takes the direct
// path (no hand-off to go-yaml, which would cost the speed) and matches sigs.k8s.io/yaml.
func TestFastPathCoversRenderedTrees(t *testing.T) {
	docs := 0
	for _, tp := range append(rendertest.Many(8, 5), rendertest.Acme(), rendertest.Globex(), rendertest.Initech()) {
		files, err := render.Tenant(tp, render.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for p, b := range files {
			if p == render.FileCRDs || p == render.FileWebhook {
				continue // the same bytes for every tenant, encoded once per run by sigs.k8s.io/yaml
			}
			for _, chunk := range strings.Split(string(b), "\n---\n") {
				var v any
				if err := yaml.Unmarshal([]byte(chunk), &v); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if v == nil {
					continue
				}
				j := jsonOf(t, v)
				same(t, j)
				if _, ok := fastyaml.Fast(j); !ok {
					t.Errorf("%s/%s: went to the go-yaml fallback", tp.Tenant.Name, p)
				}
				docs++
			}
		}
	}
	t.Logf("%d documents", docs)
}

// TestMatchesSigsYAML covers the strings and shapes where go-yaml quotes, folds, or writes
// blocks: each either takes the direct path correctly or falls back, never differs.
func TestMatchesSigsYAML(t *testing.T) {
	strs := []string{
		"", "a", "true", "True", "yes", "n", "null", "~", "0", "16", "-1", "007", "1e3", "1.5", ".5", ".inf",
		"0x1F", "1_000", "2001-12-14", "12:30", "5s", "3m", "200Gi", "2Ti", "1E", "-", "--", "---x", "- x", "-x",
		"-1x", "--flag=v", "-cc.pass_config.fuse_allreduce_rms=False", "a: b", "a:b", "a:", "a #b", "a#b", "#a",
		"@a", "*a", "&a", "!a", "|a", ">a", "%a", "'a", "\"a", "`a", "{a}", "[a]", "a,b", ",a", "?a", "a?",
		"$IFACE_NAME", "/health", "_x", "(x)", "metal3.*", "nvidia.com/GH100_H100_SXM5_80GB", "vllm/vllm-openai:latest",
		" lead", "trail ", "two  spaces", "tab\there", "é", "a\\b", "<<", "x<y>", "ünï",
		"kimi (moonshotai/Kimi-K2-Instruct, 1 x 16 GPUs)",
		strings.Repeat("word ", 30) + "end", strings.Repeat("x", 100), "short one two",
		"line\n", "line", "a\nb", "a\nb\n", "a\nb\n\n", "\nlead", " lead\nx", "trail \nx", "x\n y", "x\n\n\ny\n",
		"tab\tline\nx\n", "ü\nx\n", "a\r\nb\n", "#!/bin/bash\nset -e\n\n  indented\n",
	}
	for _, s := range strs {
		same(t, jsonOf(t, map[string]any{"k": s}))
		same(t, jsonOf(t, map[string]any{"outer": map[string]any{"k": s, "list": []any{s, map[string]any{"in": s}}}}))
		same(t, jsonOf(t, []any{s}))
		same(t, jsonOf(t, map[string]any{s: 1}))
		// A long key pushes values past the fold column.
		same(t, jsonOf(t, map[string]any{strings.Repeat("k", 60): s}))
	}
	keys := map[string]any{}
	for _, k := range []string{"a10", "a9", "a09", "a1", "a_b", "aB", "ab", "a.b", "a-b", "A", "z", "0", "10", "9", "é", "a0", "a00", "x1y", "x01y"} {
		keys[k] = k
	}
	same(t, jsonOf(t, keys))
	for _, v := range []any{1, -3, 1.5, 1e21, 123456789012345678, true, nil, map[string]any{}, []any{}, []any{[]any{1}}, "x"} {
		same(t, jsonOf(t, map[string]any{"v": v}))
		same(t, jsonOf(t, []any{v}))
		same(t, jsonOf(t, v))
	}
}

// TestMarshalMatchesManifest: Marshal is manifest.Encode for one object.
func TestMarshalMatchesManifest(t *testing.T) {
	v := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]string{"a": "1\n2\n"}}
	want, _ := manifest.Encode(v)
	got, err := fastyaml.Marshal(v)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
}

// FuzzFromJSON: for any strings in keys, values and lists, the output equals
// sigs.k8s.io/yaml's, and nothing panics.
func FuzzFromJSON(f *testing.F) {
	for _, s := range []string{"", "a b", "a: b", "line\nnext\n", "16", "true", "-x", "é", strings.Repeat("ab ", 40)} {
		f.Add("key", s, 3)
	}
	f.Fuzz(func(t *testing.T, k, s string, n int) {
		same(t, jsonOf(t, map[string]any{k: s, "n": n, "l": []any{s, k}, "m": map[string]any{s: k, "d": map[string]any{"v": s}}}))
	})
}

// FuzzRawJSON feeds arbitrary bytes: FromJSON fails exactly when sigs.k8s.io/yaml does, or
// writes the same.
func FuzzRawJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,2,{"b":"c"}]}`, `{"a":"\u00e9\n"}`, `[`, `{"a":}`, `"x"`, `1`, `{"a":1.5e3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, j []byte) {
		if !json.Valid(j) {
			return // both sides take JSON from encoding/json only
		}
		same(t, j)
	})
}

// benchObject is a rendered two-node Kimi-K2 worker VM, decoded into KubeVirt's Go type.
func benchObject(b *testing.B) any {
	files, err := render.Tenant(rendertest.Globex(), render.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var vm kubevirtv1.VirtualMachine
	if err := yaml.UnmarshalStrict(files["jobs/kimi/r0-n1-vm.yaml"], &vm); err != nil {
		b.Fatal(err)
	}
	return &vm
}

// BenchmarkMarshalVM and BenchmarkSigsYAMLVM compare the two encoders on the same VM.
func BenchmarkMarshalVM(b *testing.B) {
	vm := benchObject(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fastyaml.Marshal(vm); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSigsYAMLVM(b *testing.B) {
	vm := benchObject(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := yaml.Marshal(vm); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDirectMatchesSigsYAML runs typed Go values through Marshal (the direct path) and
// sigs.k8s.io/yaml: json tags and options, embedded structs and their shadowing rules,
// marshalers, nil and empty values, maps of every flavour, and a cycle.
func TestDirectMatchesSigsYAML(t *testing.T) {
	type Inner struct {
		A string `json:"a,omitempty"`
		B int    `json:"b"`
	}
	type Embedded struct {
		Inner
		Shadow string `json:"shadow"`
		Tie    string
	}
	type Other struct {
		Tie string
	}
	type Tagged struct {
		Name string `json:"tie"`
	}
	type Node struct {
		Name string `json:"name"`
		Next *Node  `json:"next,omitempty"`
	}
	type T struct {
		Embedded
		*Other
		Tagged
		Shadow    string                       `json:"shadow"`
		Skip      string                       `json:"-"`
		private   string                       //nolint:unused // unexported fields are not written
		Plain     string                       // no tag: the Go name
		Q         resource.Quantity            `json:"q"`
		QP        *resource.Quantity           `json:"qp,omitempty"`
		IOS       intstr.IntOrString           `json:"ios"`
		Time      metav1.Time                  `json:"time,omitzero"`
		Labels    map[string]string            `json:"labels,omitempty"`
		Res       corev1.ResourceList          `json:"res"`
		NilMap    map[string]int               `json:"nilMap"`
		EmptyMap  map[string]int               `json:"emptyMap"`
		NilSlice  []string                     `json:"nilSlice"`
		Empty     []string                     `json:"empty"`
		Structs   []Inner                      `json:"structs"`
		EmptyObjs []struct{}                   `json:"emptyObjs"`
		Any       any                          `json:"any"`
		AnyMap    map[string]any               `json:"anyMap"`
		Ptr       *Inner                       `json:"ptr"`
		Bools     []bool                       `json:"bools"`
		Nested    map[string]map[string]string `json:"nested"`
		Float     float64                      `json:"float,omitempty"`
		Bytes     []byte                       `json:"bytes,omitempty"`
		U         uint16                       `json:"u"`
		Neg       int8                         `json:"neg"`
	}
	qp := resource.MustParse("1.5Gi")
	v := T{
		Embedded: Embedded{Inner: Inner{A: "inner", B: 1}, Shadow: "deep", Tie: "embedded"},
		Other:    &Other{Tie: "other"},
		Tagged:   Tagged{Name: "tagged wins"},
		Shadow:   "top", Skip: "x", private: "p", Plain: "plain",
		Q: resource.MustParse("225Gi"), QP: &qp, IOS: intstr.FromString("http"),
		Labels:   map[string]string{"b": "2", "a": "1", "a10": "x", "a9": "y", "true": "false", "e": ""},
		Res:      corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1800Gi"), "nvidia.com/gpu": resource.MustParse("8")},
		EmptyMap: map[string]int{}, Empty: []string{},
		Structs: []Inner{{A: "x"}, {}}, EmptyObjs: []struct{}{{}},
		Any: map[string]any{"k": []any{"v", 1, nil}}, AnyMap: map[string]any{"x": nil, "y": true},
		Bools: []bool{true, false}, Nested: map[string]map[string]string{"n": {"m": "o"}, "e": {}},
		U: 7, Neg: -3,
	}
	type tree map[string]tree // a type that contains itself
	for i, x := range []any{v, &v, T{}, &T{}, []T{v}, map[string]T{"k": v}, Inner{}, []any{}, map[string]any{},
		tree{"a": tree{"b": nil, "c": {}}}, nil, "top-level string", 3} {
		if _, direct := fastyaml.Direct(x); i < 10 && !direct {
			t.Errorf("%d (%T): the direct path declined", i, x)
		}
		want, wantErr := yaml.Marshal(x)
		got, gotErr := fastyaml.Marshal(x)
		if (wantErr != nil) != (gotErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("%T: fastyaml\n%s (%v)\nsigs.k8s.io/yaml\n%s (%v)", x, got, gotErr, want, wantErr)
		}
	}
	// A float, []byte, the ",string" option and a cycle decline the direct path.
	v.Float, v.Bytes = 1.5, []byte("hi")
	type WithString struct {
		N int `json:"n,string"`
	}
	type Dash struct {
		D string `json:"-,"` // a key named "-": go-yaml quotes it
	}
	loop := &Node{Name: "a"}
	loop.Next = loop
	for _, x := range []any{v, WithString{N: 4}, Dash{D: "x"}, loop} {
		if _, direct := fastyaml.Direct(x); direct {
			t.Errorf("%T: the direct path took what it must decline", x)
		}
		want, wantErr := yaml.Marshal(x)
		got, gotErr := fastyaml.Marshal(x)
		if (wantErr != nil) != (gotErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("%T: fastyaml\n%s (%v)\nsigs.k8s.io/yaml\n%s (%v)", x, got, gotErr, want, wantErr)
		}
	}
}

// zeroAt42 is "zero" by its own IsZero (pointer receiver), not by Go's zero value.
type zeroAt42 struct {
	N int `json:"n"`
}

func (z *zeroAt42) IsZero() bool { return z.N == 42 }

// valueZero has IsZero on the value.
type valueZero struct {
	S string `json:"s"`
}

func (z valueZero) IsZero() bool { return z.S == "none" }

// TestOmitZeroMethods: omitzero consults IsZero methods (value or pointer receiver, also on a
// value that is not addressable) exactly as encoding/json does.
func TestOmitZeroMethods(t *testing.T) {
	type holder struct {
		P  zeroAt42   `json:"p,omitzero"`
		V  valueZero  `json:"v,omitzero"`
		PP *zeroAt42  `json:"pp,omitzero"`
		VP *valueZero `json:"vp,omitzero"`
		Z  int        `json:"z,omitzero"`
	}
	for _, h := range []holder{
		{P: zeroAt42{42}, V: valueZero{"none"}},
		{P: zeroAt42{0}, V: valueZero{""}, PP: &zeroAt42{42}, VP: &valueZero{"none"}, Z: 1},
		{PP: &zeroAt42{1}, VP: &valueZero{"x"}},
	} {
		for _, x := range []any{h, &h} {
			want, _ := yaml.Marshal(x)
			got, err := fastyaml.Marshal(x)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%+v: fastyaml\n%s\nsigs.k8s.io/yaml\n%s", x, got, want)
			}
			if _, direct := fastyaml.Direct(x); !direct {
				t.Errorf("%+v: the direct path declined", x)
			}
		}
	}
}

// ptrMarshaled has MarshalJSON on the pointer: encoding/json calls it only on addressable
// values (reached through a pointer or a slice), and otherwise writes the struct's fields.
type ptrMarshaled struct {
	X string `json:"x"`
}

func (p *ptrMarshaled) MarshalJSON() ([]byte, error) { return []byte(`"custom-` + p.X + `"`), nil }

// TestAddressability: the direct path calls pointer-receiver marshalers exactly where
// encoding/json does, although it boxes values to read their fields.
func TestAddressability(t *testing.T) {
	type inner struct {
		Val ptrMarshaled `json:"val"`
	}
	type embeddedPtr struct {
		*inner
	}
	type holder struct {
		Val   ptrMarshaled            `json:"val"`
		Ptr   *ptrMarshaled           `json:"ptr"`
		Slice []ptrMarshaled          `json:"slice"`
		Array [1]ptrMarshaled         `json:"array"`
		Map   map[string]ptrMarshaled `json:"map"`
		Any   any                     `json:"any"`
		In    *inner                  `json:"in"`
		Emb   embeddedPtr             `json:"emb"`
	}
	h := holder{
		Val: ptrMarshaled{"v"}, Ptr: &ptrMarshaled{"p"}, Slice: []ptrMarshaled{{"s"}}, Array: [1]ptrMarshaled{{"a"}},
		Map: map[string]ptrMarshaled{"k": {"m"}}, Any: ptrMarshaled{"i"}, In: &inner{Val: ptrMarshaled{"in"}},
		Emb: embeddedPtr{&inner{Val: ptrMarshaled{"e"}}},
	}
	for _, x := range []any{h, &h, []holder{h}, map[string]holder{"h": h}} {
		want, _ := yaml.Marshal(x)
		got, err := fastyaml.Marshal(x)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T: fastyaml\n%s\nsigs.k8s.io/yaml\n%s", x, got, want)
		}
		if _, direct := fastyaml.Direct(x); !direct {
			t.Errorf("%T: the direct path declined", x)
		}
	}
}
