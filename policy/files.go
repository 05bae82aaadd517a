package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

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
	return (*DecodeCache)(nil).DecodeFiles(files)
}

// DecodeCache remembers what each file's content decoded to, so that a tenant rendered again
// after one of its jobs changed decodes that job's files only (the API renders and checks the
// whole tenant on every write; decoding is most of the check). Objects are handed out as deep
// copies. Safe for concurrent use; a nil cache decodes every time.
type DecodeCache struct {
	mu    sync.Mutex
	m     map[[32]byte]*decodedFile
	order [][32]byte
}

// maxDecoded bounds the files a DecodeCache keeps: a few tenants' worth of rendered files.
const maxDecoded = 8192

type decodedFile struct {
	objs    []client.Object
	docs    int
	skipped bool
	errs    []error // without the file's path
}

// DecodeFiles is the package's DecodeFiles, each content decoded once.
func (c *DecodeCache) DecodeFiles(files map[string][]byte) (*Decoded, error) {
	d := &Decoded{}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(files)) {
		f := c.file(files[p])
		if f.skipped {
			d.Skipped = append(d.Skipped, p)
			continue
		}
		for _, err := range f.errs {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
		if len(f.errs) > 0 && f.docs == 0 && f.objs == nil {
			continue
		}
		d.Files++
		d.Documents += f.docs
		for _, obj := range f.objs {
			if c != nil {
				obj = obj.DeepCopyObject().(client.Object)
			}
			d.Objects = append(d.Objects, obj)
			d.Paths = append(d.Paths, p)
		}
	}
	return d, errors.Join(errs...)
}

func (c *DecodeCache) file(data []byte) *decodedFile {
	if c == nil {
		return decodeFile(data)
	}
	key := sha256.Sum256(data)
	c.mu.Lock()
	f, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return f
	}
	f = decodeFile(data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[32]byte]*decodedFile{}
	}
	if _, ok := c.m[key]; !ok {
		c.m[key] = f
		c.order = append(c.order, key)
		if len(c.order) > maxDecoded {
			delete(c.m, c.order[0])
			c.order = c.order[1:]
		}
	}
	return f
}

// decodeFile decodes one file's documents into the objects of the kinds the policy reads.
func decodeFile(data []byte) *decodedFile {
	docs, err := manifest.Decode(data)
	if err != nil {
		if noObjects(data) {
			return &decodedFile{skipped: true}
		}
		return &decodedFile{errs: []error{err}}
	}
	f := &decodedFile{docs: len(docs), objs: []client.Object{}}
	for _, u := range docs {
		obj, err := FromUnstructured(u)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err))
			continue
		}
		if obj != nil {
			f.objs = append(f.objs, obj)
		}
	}
	return f
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
	return (*DecodeCache)(nil).ReviewFiles(ctx, base, files)
}

// ReviewFiles is the package's ReviewFiles, each file's content decoded once.
func (c *DecodeCache) ReviewFiles(ctx context.Context, base Source, files map[string][]byte) ([]Result, error) {
	d, err := c.DecodeFiles(files)
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
