package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/manifest"
)

// Decoded is a set of manifest files decoded for review.
type Decoded struct {
	// Objects are the objects of the kinds the policy reads, in path then document order;
	// Paths[i] is the file Objects[i] came from.
	Objects []client.Object
	Paths   []string
	// Files and Documents count the manifest files and all their objects (any kind).
	Files, Documents int
	// Skipped are the files that hold no Kubernetes object (a values file such as
	// vcluster.yaml).
	Skipped []string
}

// DecodeFiles decodes manifest files (path to content; the shape of the generator's
// render.Files), in path order, strictly (FromUnstructured). A file that does not decode is an
// error naming it; all such errors are returned together.
func DecodeFiles(files map[string][]byte) (*Decoded, error) {
	d := &Decoded{}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(files)) {
		docs, err := manifest.Decode(files[p])
		if err != nil {
			if noObjects(files[p]) {
				d.Skipped = append(d.Skipped, p)
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		d.Files++
		d.Documents += len(docs)
		for _, u := range docs {
			obj, err := FromUnstructured(u)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s/%s: %w", p, u.GetKind(), u.GetName(), err))
				continue
			}
			if obj != nil {
				d.Objects = append(d.Objects, obj)
				d.Paths = append(d.Paths, p)
			}
		}
	}
	return d, errors.Join(errs...)
}

// noObjects reports whether data is YAML in which no document is a Kubernetes object (neither
// apiVersion nor kind), as opposed to a broken manifest.
func noObjects(data []byte) bool {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			return errors.Is(err, io.EOF)
		}
		if doc["apiVersion"] != nil || doc["kind"] != nil {
			return false
		}
	}
}

// ReviewFiles decodes files (DecodeFiles) and reviews their objects together (ReviewObjects):
// what the generator calls on a tenant's rendered files before it commits them. It returns the
// denied results only; an error means the files or the policy data are unusable.
func ReviewFiles(ctx context.Context, base Source, files map[string][]byte) ([]Result, error) {
	d, err := DecodeFiles(files)
	if err != nil {
		return nil, err
	}
	results, err := ReviewObjects(ctx, base, d.Objects)
	if err != nil {
		return nil, err
	}
	var denied []Result
	for _, r := range results {
		if !r.Allowed() {
			denied = append(denied, r)
		}
	}
	return denied, nil
}

// DenialLines renders results' violations one per line, "DENY <kind>/<namespace>/<name>:
// <reason>", the form `inferplane validate` prints and `generate` refuses a commit with.
func DenialLines(results []Result) []string {
	var lines []string
	for _, r := range results {
		for _, e := range r.Errors {
			lines = append(lines, fmt.Sprintf("DENY %s: %s", r.Ref, fielderr.Describe(e)))
		}
	}
	return lines
}
