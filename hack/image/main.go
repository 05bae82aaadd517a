// Command image builds inferplane's OCI image without a container engine (make image): a
// static inferplane binary on an empty base plus CA certificates, run as a non-root user, no
// shell. It writes one tar that is both an OCI image layout (index.json, blobs/: podman load,
// skopeo copy oci-archive:, docker load from 25 on) and a docker archive (manifest.json:
// docker load, crane push), and prints the image's reference and digest.
//
// The CA certificates are Mozilla's root store as golang.org/x/crypto/x509roots/fallback
// carries it at the version go.mod pins: the same bytes on every machine, nothing downloaded
// from a registry. Every timestamp is the commit's, so a commit builds the same image.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's layout. UID and GID 65532 are the "nonroot" user of distroless images, which the
// install manifests' securityContext names too.
const (
	binaryPath = "/usr/local/bin/inferplane"
	caPath     = "/etc/ssl/certs/ca-certificates.crt"
	home       = "/home/nonroot"
	uid        = 65532
)

type options struct {
	binary, out, repository, version, revision, created, arch, source string
}

func main() {
	// `containerdisk` and `files` build the other images of the project (make guest-image; the
	// boot test's stand-in model server); without a subcommand, inferplane's own.
	if len(os.Args) > 1 {
		if sub, ok := map[string]func([]string) (string, string, string, error){
			"containerdisk": containerDisk, "files": filesImage}[os.Args[1]]; ok {
			out, ref, digest, err := sub(os.Args[2:])
			if err != nil {
				fmt.Fprintln(os.Stderr, "image "+os.Args[1]+":", err)
				os.Exit(1)
			}
			fmt.Printf("%s\t%s\t%s\n", out, ref, digest)
			return
		}
	}
	var o options
	flag.StringVar(&o.binary, "binary", "", "the static inferplane binary (CGO_ENABLED=0) to put in the image")
	flag.StringVar(&o.out, "out", "", "the tar to write")
	flag.StringVar(&o.repository, "repository", "ghcr.io/inferplane/inferplane", "the image's repository; its tag is --version")
	flag.StringVar(&o.version, "version", "", "the build's version, the image's tag (hack/version.sh version)")
	flag.StringVar(&o.revision, "revision", "", "the commit the binary was built from")
	flag.StringVar(&o.created, "created", "", "the commit's time (RFC 3339): the image's and its files' time")
	flag.StringVar(&o.arch, "arch", "amd64", "the binary's GOARCH")
	flag.StringVar(&o.source, "source", "https://github.com/inferplane/inferplane", "where the source lives (a label)")
	flag.Parse()
	ref, digest, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "make image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s\t%s\t%s\n", o.out, ref, digest)
}

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func (o options) check() (time.Time, error) {
	var errs []error
	if o.binary == "" || o.out == "" {
		errs = append(errs, errors.New("--binary and --out are required"))
	}
	created, more := tagAndCreated("--version", o.version, o.created)
	return created, errors.Join(append(errs, more...)...)
}

// tagAndCreated checks an image tag given by tagFlag (never latest) and --created (RFC 3339;
// empty: the Unix epoch, for builds that do not depend on when they ran).
func tagAndCreated(tagFlag, tag, createdText string) (time.Time, []error) {
	var errs []error
	if !tagPattern.MatchString(tag) || tag == "latest" {
		errs = append(errs, fmt.Errorf("%s %q: want an image tag (letters, digits, _ . -; at most 128), never latest", tagFlag, tag))
	}
	created := time.Unix(0, 0).UTC()
	if createdText != "" {
		t, err := time.Parse(time.RFC3339, createdText)
		if err != nil {
			errs = append(errs, fmt.Errorf("--created %q: want RFC 3339 such as 2026-12-01T04:46:06Z", createdText))
		}
		created = t.UTC()
	}
	return created, errs
}

// build writes the image to o.out and returns its reference and manifest digest.
func build(o options) (string, string, error) {
	created, err := o.check()
	if err != nil {
		return "", "", err
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return "", "", err
	}
	base, err := baseFiles(created)
	if err != nil {
		return "", "", err
	}
	app, err := layerTar(created, file{name: "/usr/", mode: 0o755}, file{name: "/usr/local/", mode: 0o755},
		file{name: "/usr/local/bin/", mode: 0o755}, file{name: binaryPath, mode: 0o755, data: bin})
	if err != nil {
		return "", "", err
	}
	img, err := image(o, created, base, app)
	if err != nil {
		return "", "", err
	}
	ref := o.repository + ":" + o.version
	digest, err := img.Digest()
	if err != nil {
		return "", "", err
	}
	if err := writeArchive(o.out, img, ref, o.version, created); err != nil {
		return "", "", err
	}
	return ref, digest.String(), nil
}

// image assembles the OCI image: two layers (the base's files, then the binary) and its
// configuration.
func image(o options, created time.Time, base, app []byte) (v1.Image, error) {
	img, err := layered(created, "make image", []string{
		"CA certificates (Mozilla's, golang.org/x/crypto/x509roots), /etc/passwd, home and /tmp",
		"inferplane " + o.version}, base, app)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = o.arch, "linux", v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint: []string{binaryPath},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir: home,
		Env:        []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + caPath, "HOME=" + home},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "inferplane",
			"org.opencontainers.image.description": "Control plane for managed LLM inference on Kubernetes",
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.revision":    o.revision,
			"org.opencontainers.image.source":      o.source,
			"org.opencontainers.image.created":     created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// layered is an empty OCI image with the given layers (uncompressed tars), each with its
// history comment.
func layered(created time.Time, createdBy string, comments []string, layers ...[]byte) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
			Created: v1.Time{Time: created}, CreatedBy: createdBy, Comment: comments[i]}}); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// baseFiles is the layer an empty base needs under a Go binary: CA certificates for TLS to API
// servers and git hosts, a passwd and group file naming the non-root user, its home, and /tmp.
func baseFiles(created time.Time) ([]byte, error) {
	var certs bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		// A root with a constraint (NSS's distrust-after date) cannot be expressed in a PEM
		// bundle; leaving it out is the safe side.
		if root.Constraint != nil {
			continue
		}
		if _, err := x509.ParseCertificate(root.Certificate); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("CA bundle: no certificates")
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", uid, uid, home)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	return layerTar(created,
		file{name: "/etc/", mode: 0o755}, file{name: "/etc/ssl/", mode: 0o755}, file{name: "/etc/ssl/certs/", mode: 0o755},
		file{name: caPath, mode: 0o644, data: certs.Bytes()},
		file{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		file{name: "/etc/group", mode: 0o644, data: []byte(group)},
		file{name: "/home/", mode: 0o755}, file{name: home + "/", mode: 0o700, owner: uid},
		file{name: "/tmp/", mode: 0o1777})
}

// file is one entry of a layer; a name ending in / is a folder.
type file struct {
	name  string
	mode  int64
	data  []byte
	owner int
}

// layerTar writes files as a layer (a tar with relative names, every time the commit's).
func layerTar(created time.Time, files ...file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	parents := map[string]bool{}
	for _, f := range files {
		h := &tar.Header{Name: f.name[1:], Mode: f.mode, ModTime: created, Uid: f.owner, Gid: f.owner, Format: tar.FormatPAX}
		if f.name[len(f.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
			parents[f.name] = true
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
			// The binary's layer carries its folders too, so that it stands on its own.
			for dir := path.Dir(f.name); dir != "/"; dir = path.Dir(dir) {
				if !parents[dir+"/"] {
					return nil, fmt.Errorf("layer: %s comes before its folder %s/", f.name, dir)
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
