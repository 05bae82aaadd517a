package image_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/internal/version"
)

// The OCI image-spec's JSON, as much of it as the test reads (written from the spec, not
// from the library that builds the image, so that the archive is checked as any reader sees it).
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations"`
		Platform    *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	}
	index struct {
		SchemaVersion int          `json:"schemaVersion"`
		Manifests     []descriptor `json:"manifests"`
	}
	manifest struct {
		MediaType string       `json:"mediaType"`
		Config    descriptor   `json:"config"`
		Layers    []descriptor `json:"layers"`
	}
	imageConfig struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint []string          `json:"Entrypoint"`
			Cmd        []string          `json:"Cmd"`
			User       string            `json:"User"`
			Env        []string          `json:"Env"`
			WorkingDir string            `json:"WorkingDir"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	dockerEntry struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
)

// layerFile is a file of the image's file system.
type layerFile struct {
	hdr  *tar.Header
	data []byte
}

// TestMakeImage builds the image as an operator does (`make image`, no container engine) and
// checks it as a registry or a runtime would read it: the OCI layout and the docker archive in
// the tar, every blob's digest, the configuration (entrypoint, numeric non-root user, env,
// labels), the file system (no shell, CA certificates, a static binary), and that the binary
// taken out of its layer runs `version` and prints the version make stamped.
func TestMakeImage(t *testing.T) {
	root := kubeenv.RepoRoot()
	dir := t.TempDir()
	const tag = "v0.0.0-imagetest.1"
	out := filepath.Join(dir, "image.tar")
	cmd := exec.Command("make", "--no-print-directory", "image", "VERSION="+tag, "IMAGE_TAR="+out,
		"IMAGE_BINARY="+filepath.Join(dir, "build", "inferplane"))
	cmd.Dir = root
	log, err := cmd.CombinedOutput()
	require.NoError(t, err, "make image: %s", log)
	ref := version.ImageRepository + ":" + tag
	assert.Contains(t, string(log), ref, "make image names what it built")

	archive := readTar(t, out)
	for name, data := range archive {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			sum := sha256.Sum256(data)
			assert.Equal(t, hexDigest, hex.EncodeToString(sum[:]), "blob %s", name)
		}
	}
	assert.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(archive["oci-layout"]))
	var idx index
	require.NoError(t, json.Unmarshal(archive["index.json"], &idx))
	require.Len(t, idx.Manifests, 1)
	m0 := idx.Manifests[0]
	assert.Equal(t, "application/vnd.oci.image.manifest.v1+json", m0.MediaType)
	assert.Equal(t, tag, m0.Annotations["org.opencontainers.image.ref.name"])
	assert.Equal(t, ref, m0.Annotations["io.containerd.image.name"])
	var man manifest
	require.NoError(t, json.Unmarshal(blob(t, archive, m0.Digest), &man))
	assert.Equal(t, "application/vnd.oci.image.config.v1+json", man.Config.MediaType)
	var cfg imageConfig
	require.NoError(t, json.Unmarshal(blob(t, archive, man.Config.Digest), &cfg))

	var docker []dockerEntry
	require.NoError(t, json.Unmarshal(archive["manifest.json"], &docker), "the docker archive's manifest.json")
	require.Len(t, docker, 1)
	assert.Equal(t, []string{ref}, docker[0].RepoTags)
	assert.Equal(t, "blobs/sha256/"+strings.TrimPrefix(man.Config.Digest, "sha256:"), docker[0].Config)

	c := cfg.Config
	assert.Equal(t, []string{"/usr/local/bin/inferplane"}, c.Entrypoint)
	assert.Empty(t, c.Cmd)
	assert.Equal(t, "65532:65532", c.User, "a numeric non-root user: Kubernetes' runAsNonRoot can check it")
	assert.Subset(t, c.Env, []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "PATH=/usr/local/bin"})
	assert.Equal(t, "linux", cfg.OS)
	assert.NotEmpty(t, cfg.Architecture)
	assert.Equal(t, tag, c.Labels["org.opencontainers.image.version"])
	assert.Equal(t, version.Source, c.Labels["org.opencontainers.image.source"])
	if head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		assert.Equal(t, strings.TrimSpace(string(head)), c.Labels["org.opencontainers.image.revision"])
	}

	fsys := map[string]layerFile{}
	require.Len(t, man.Layers, len(cfg.RootFS.DiffIDs))
	for i, l := range man.Layers {
		assert.Equal(t, "application/vnd.oci.image.layer.v1.tar+gzip", l.MediaType)
		assert.Equal(t, "blobs/sha256/"+strings.TrimPrefix(l.Digest, "sha256:"), docker[0].Layers[i])
		unpackLayer(t, blob(t, archive, l.Digest), cfg.RootFS.DiffIDs[i], fsys)
	}
	checkFiles(t, fsys)

	// The same binary, version, commit and time give the same bytes: an image is reproducible.
	again := filepath.Join(dir, "again.tar")
	tool := exec.Command("go", "-C", filepath.Join(root, "hack", "image"), "run", ".", "--binary", filepath.Join(dir, "build", "inferplane"),
		"--out", again, "--arch", cfg.Architecture, "--version", tag, "--revision", c.Labels["org.opencontainers.image.revision"],
		"--created", c.Labels["org.opencontainers.image.created"])
	log, err = tool.CombinedOutput()
	require.NoError(t, err, "%s", log)
	first, err := os.ReadFile(out)
	require.NoError(t, err)
	second, err := os.ReadFile(again)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(first, second), "the same inputs built a different archive")

	bin := filepath.Join(dir, "inferplane-from-image")
	require.NoError(t, os.WriteFile(bin, fsys["usr/local/bin/inferplane"].data, 0o755))
	assertStatic(t, bin)
	run := exec.Command(bin, "version", "-o", "json")
	run.Env = append(slices.Clone(c.Env), "HOME="+dir) // the image's environment, nothing of ours
	got, err := run.Output()
	require.NoError(t, err)
	var info version.Info
	require.NoError(t, json.Unmarshal(got, &info), "%s", got)
	assert.Equal(t, tag, info.Version)
	assert.Equal(t, ref, info.Image)
	assert.Equal(t, "ldflags", info.StampedBy)
	assert.Equal(t, c.Labels["org.opencontainers.image.revision"], info.Commit)
}

// checkFiles: no shell, the CA bundle, the user's entry, the binary owned by root.
func checkFiles(t *testing.T, fsys map[string]layerFile) {
	t.Helper()
	for name := range fsys {
		base := path.Base(name)
		assert.NotContains(t, []string{"sh", "bash", "ash", "dash", "busybox", "zsh"}, base, "a shell in the image: %s", name)
		assert.False(t, strings.HasPrefix(name, "bin/") || name == "bin", "nothing in /bin: %s", name)
	}
	bin, ok := fsys["usr/local/bin/inferplane"]
	require.True(t, ok, "the binary at /usr/local/bin/inferplane")
	assert.EqualValues(t, 0o755, bin.hdr.Mode&0o7777)
	assert.Zero(t, bin.hdr.Uid, "owned by root: the user it runs as cannot replace it")

	pool := x509.NewCertPool()
	ca := fsys["etc/ssl/certs/ca-certificates.crt"].data
	require.True(t, pool.AppendCertsFromPEM(ca), "a PEM CA bundle")
	assert.Greater(t, bytes.Count(ca, []byte("BEGIN CERTIFICATE")), 100, "Mozilla's root store")
	assert.Contains(t, string(fsys["etc/passwd"].data), "nonroot:x:65532:65532:")
	home := fsys["home/nonroot"]
	require.NotNil(t, home.hdr, "the user's home")
	assert.Equal(t, 65532, home.hdr.Uid)
}

func readTar(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			out[h.Name] = b
		}
	}
}

func blob(t *testing.T, archive map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := archive["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	require.True(t, ok, "blob %s missing", digest)
	return b
}

// unpackLayer adds a gzipped layer's files to fsys after checking its uncompressed digest
// against the config's diff_id.
func unpackLayer(t *testing.T, gz []byte, diffID string, fsys map[string]layerFile) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	assert.Equal(t, diffID, "sha256:"+hex.EncodeToString(sum[:]), "the layer's diff_id")
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		fsys[strings.TrimSuffix(path.Clean(h.Name), "/")] = layerFile{hdr: h, data: b}
	}
}

// assertStatic: no dynamic loader and no shared library (CGO_ENABLED=0): it runs on an empty
// base.
func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "the binary asks for a dynamic loader")
	}
	libs, _ := f.ImportedLibraries()
	assert.Empty(t, libs, "the binary needs shared libraries")
}
