package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"github.com/inferplane/inferplane/internal/fileutil"
	"github.com/inferplane/inferplane/internal/manifest"
)

// Files of an operator repository's gateway folder.
const (
	FileManifests     = "gateway.yaml"
	FileKustomization = "kustomization.yaml"
)

// YAML is the manifests as one YAML stream in apply order, with a header that says how to
// create the one Secret they need and do not carry.
func YAML(o Options) ([]byte, error) {
	objs, err := Manifests(o)
	if err != nil {
		return nil, err
	}
	_ = o.defaults() // checked by Manifests; fills the names the header uses
	anys := make([]any, len(objs))
	for i, obj := range objs {
		anys[i] = obj
	}
	body, err := manifest.Encode(anys...)
	if err != nil {
		return nil, err
	}
	header := "# inferplane gateway: the xDS servers, the key checks and Envoy, for the host cluster.\n" +
		"# Before applying, create the API key secret (never stored in git):\n" +
		"#   kubectl -n " + o.Namespace + " create secret generic " + o.KeySecret +
		" --from-literal=" + keySecretKey + "=\"$(inferplane keys secret)\"\n"
	return append([]byte(header), body...), nil
}

// WriteDir writes the manifests and a kustomization listing them into dir, each file in one
// rename; changed is false when both files already held the same bytes. also are other files
// of dir the kustomization lists after the gateway's (the product API's, written by its own
// install package).
func WriteDir(dir string, o Options, also ...string) (changed bool, err error) {
	data, err := YAML(o)
	if err != nil {
		return false, err
	}
	files := map[string][]byte{
		FileManifests:     data,
		FileKustomization: []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + strings.Join(append([]string{FileManifests}, also...), "\n- ") + "\n"),
	}
	for _, name := range []string{FileManifests, FileKustomization} {
		path := filepath.Join(dir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, files[name]) {
			continue
		}
		if err := fileutil.WriteAtomic(path, files[name], 0o644); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
}
