package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/generator/render"
)

// Documents is a rendered tree as parsed YAML documents per file path.
type Documents map[string][]any

// HelmDocuments splits Helm's output into files by the "# file: <path>" line each document
// of the chart starts with.
func HelmDocuments(out map[string]string) (Documents, error) {
	docs := Documents{}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, chunk := range splitDocs(out[n]) {
			rest, ok := strings.CutPrefix(chunk, "# file: ")
			if !ok {
				if strings.TrimSpace(chunk) != "" {
					return nil, fmt.Errorf("%s: a document without a # file: line:\n%s", n, chunk)
				}
				continue
			}
			p, body, _ := strings.Cut(rest, "\n")
			v, err := parse([]byte(body))
			if err != nil {
				return nil, fmt.Errorf("%s (%s): %w", n, p, err)
			}
			docs[p] = append(docs[p], v)
		}
	}
	return docs, nil
}

// RenderDocuments parses the Go render's files. The CRDs and the webhook install are left
// out: they are the same bytes for every tenant, copied rather than templated, so the chart
// does not repeat them and neither side spends time on them.
func RenderDocuments(files render.Files) (Documents, error) {
	docs := Documents{}
	for p, b := range files {
		if p == render.FileCRDs || p == render.FileWebhook {
			continue
		}
		for _, chunk := range splitDocs(string(b)) {
			v, err := parse([]byte(chunk))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if v != nil { // an empty or comment-only document
				docs[p] = append(docs[p], v)
			}
		}
	}
	return docs, nil
}

// splitDocs splits a YAML stream at its "---" lines, keeping each document's final newline.
func splitDocs(s string) []string {
	s = strings.TrimPrefix(s, "---\n")
	docs := strings.Split(s, "\n---\n")
	for i := range docs[:len(docs)-1] {
		docs[i] += "\n"
	}
	return docs
}

// parse reads one YAML document into generic values, through JSON so both sides end up with
// the same types.
func parse(b []byte) (any, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// Equivalent reports how the Helm and Go trees differ: files one side lacks, and documents
// that parse to different values. Formatting (key order, quoting, indentation) is not a
// difference: what Kubernetes, Argo CD and vCluster read is.
func Equivalent(helm, goRender Documents) []string {
	var diffs []string
	paths := map[string]bool{}
	for p := range helm {
		paths[p] = true
	}
	for p := range goRender {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	slices.Sort(sorted)
	for _, p := range sorted {
		h, g := helm[p], goRender[p]
		switch {
		case h == nil:
			diffs = append(diffs, p+": only the Go render has it")
		case g == nil:
			diffs = append(diffs, p+": only Helm has it")
		case len(h) != len(g):
			diffs = append(diffs, fmt.Sprintf("%s: Helm %d documents, Go %d", p, len(h), len(g)))
		default:
			for i := range h {
				if !reflect.DeepEqual(h[i], g[i]) {
					hy, _ := yaml.Marshal(h[i])
					gy, _ := yaml.Marshal(g[i])
					diffs = append(diffs, fmt.Sprintf("%s: document %d differs\n--- helm\n%s--- go\n%s", p, i, hy, gy))
				}
			}
		}
	}
	return diffs
}
