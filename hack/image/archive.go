package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// dockerManifest is one entry of a docker archive's manifest.json (what docker load and
// crane push read); its paths point at the OCI layout's blobs, so nothing is stored twice.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// writeArchive writes img as an OCI image layout inside a tar, plus a docker archive's
// manifest.json over the same blobs. The entries are in a fixed order with the commit's
// time: the same image gives the same bytes. It writes to a temporary file and renames it, so a
// failure leaves no half-written archive.
func writeArchive(out string, img v1.Image, ref, tag string, created time.Time) error {
	entries, err := archiveEntries(img, ref, tag)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	for _, e := range entries {
		if err := e.write(tw, created); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

type entry struct {
	name string
	data []byte // nil and no layer: a folder
	// layer, when set, is streamed from its compressed form (a containerDisk's layer is a
	// whole disk: it is never held in memory).
	layer v1.Layer
}

func (e entry) write(tw *tar.Writer, created time.Time) error {
	h := &tar.Header{Name: e.name, Mode: 0o644, ModTime: created, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
	switch {
	case e.layer != nil:
		size, err := e.layer.Size()
		if err != nil {
			return err
		}
		h.Size = size
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		rc, err := e.layer.Compressed()
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(tw, rc)
		if err == nil && n != size {
			err = fmt.Errorf("layer gave %d bytes, not the %d its descriptor says", n, size)
		}
		return err
	case e.data == nil:
		h.Typeflag, h.Mode, h.Name = tar.TypeDir, 0o755, e.name+"/"
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(e.data)
	return err
}

func archiveEntries(img v1.Image, ref, tag string) ([]entry, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	entries := []entry{{name: "blobs"}, {name: "blobs/sha256"}, {name: blob(configName), data: config}}
	docker := dockerManifest{Config: blob(configName), RepoTags: []string{ref}}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{name: blob(d), layer: l})
		docker.Layers = append(docker.Layers, blob(d))
	}
	entries = append(entries, entry{name: blob(digest), data: manifest})
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{{
		MediaType: types.OCIManifestSchema1, Size: int64(len(manifest)), Digest: digest,
		Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		// ref.name is the OCI layout's tag; containerd (and docker load on it) reads the full name.
		Annotations: map[string]string{"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": ref},
	}}}
	for _, j := range []struct {
		name string
		v    any
	}{
		{"oci-layout", map[string]string{"imageLayoutVersion": "1.0.0"}},
		{"index.json", index},
		{"manifest.json", []dockerManifest{docker}},
	} {
		b, err := json.Marshal(j.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", j.name, err)
		}
		entries = append(entries, entry{name: j.name, data: bytes.TrimSpace(b)})
	}
	return entries, nil
}
