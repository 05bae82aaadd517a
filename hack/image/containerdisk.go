package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// qemuUID owns a containerDisk's disk: virt-launcher runs QEMU as user and group 107, and
// KubeVirt's containerDisk format asks for the file under /disk/ to be theirs.
const qemuUID = 107

// labels is a repeatable --label key=value flag.
type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("--label %q: want key=value", s)
	}
	l[k] = v
	return nil
}

// imageFlags are the flags every image of this command takes: where it goes, its name, its time.
type imageFlags struct {
	out, repository, tag, created, arch, revision, source string
	labels                                                labels
}

func (f *imageFlags) register(fs *flag.FlagSet, repository string) {
	fs.StringVar(&f.out, "out", "", "the tar to write (an OCI layout and a docker archive in one)")
	fs.StringVar(&f.repository, "repository", repository, "the image's repository")
	fs.StringVar(&f.tag, "tag", "", "the image's tag")
	fs.StringVar(&f.created, "created", "", "the image's and its files' time (RFC 3339); default 1970-01-01")
	fs.StringVar(&f.arch, "arch", "amd64", "the image's architecture")
	fs.StringVar(&f.revision, "revision", "", "the commit it was built from (a label)")
	fs.StringVar(&f.source, "source", "https://github.com/inferplane/inferplane", "where its recipe lives (a label)")
	f.labels = labels{}
	fs.Var(f.labels, "label", "a label key=value (repeatable)")
}

func (f *imageFlags) check() (time.Time, error) {
	var errs []error
	if f.out == "" {
		errs = append(errs, errors.New("--out is required"))
	}
	created, more := tagAndCreated("--tag", f.tag, f.created)
	return created, errors.Join(append(errs, more...)...)
}

// finish sets the configuration's platform, time and labels (with the OCI ones), writes the
// archive and returns the reference and the manifest's digest.
func (f *imageFlags) finish(img v1.Image, created time.Time, title, description string, cfg v1.Config) (string, string, string, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return "", "", "", err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = f.arch, "linux", v1.Time{Time: created}
	cfg.Labels = map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     f.tag,
		"org.opencontainers.image.revision":    f.revision,
		"org.opencontainers.image.source":      f.source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	for k, v := range f.labels {
		cfg.Labels[k] = v
	}
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", "", "", err
	}
	ref := f.repository + ":" + f.tag
	digest, err := img.Digest()
	if err != nil {
		return "", "", "", err
	}
	if err := writeArchive(f.out, img, ref, f.tag, created); err != nil {
		return "", "", "", err
	}
	return f.out, ref, digest.String(), nil
}

// containerDisk builds a KubeVirt containerDisk: one layer holding the disk file under /disk/,
// owned by QEMU's user, on an empty base with no entrypoint (virt-launcher only reads the
// file). The layer is written compressed to a file beside the output once and streamed from
// there: a disk is never held in memory.
func containerDisk(args []string) (string, string, string, error) {
	fs := flag.NewFlagSet("containerdisk", flag.ContinueOnError)
	var f imageFlags
	f.register(fs, "ghcr.io/inferplane/gpu-guest")
	disk := fs.String("disk", "", "the disk image (qcow2 or raw) to put under /disk/")
	title := fs.String("title", "gpu-guest", "the image's title (a label)")
	description := fs.String("description", "inferplane's GPU guest disk for KubeVirt (containerDisk)", "the image's description (a label)")
	if err := fs.Parse(args); err != nil {
		return "", "", "", err
	}
	created, err := f.check()
	if err != nil || *disk == "" {
		return "", "", "", errors.Join(err, map[bool]error{true: errors.New("--disk is required")}[*disk == ""])
	}
	gz, err := diskLayer(*disk, filepath.Dir(f.out), created)
	if err != nil {
		return "", "", "", err
	}
	defer os.Remove(gz)
	layer, err := tarball.LayerFromFile(gz, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", "", "", err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "make guest-image", Comment: "/disk/" + filepath.Base(*disk)}}); err != nil {
		return "", "", "", err
	}
	return f.finish(img, created, *title, *description, v1.Config{})
}

// diskLayer writes the layer /disk/<name> (gzip, the fastest level: a qcow2 is compressed
// already) to a temporary file in dir and returns its name.
func diskLayer(disk, dir string, created time.Time) (string, error) {
	in, err := os.Open(disk)
	if err != nil {
		return "", err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := os.CreateTemp(dir, ".disk-layer-*.tar.gz")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			os.Remove(out.Name())
		}
	}()
	zw, err := gzip.NewWriterLevel(out, gzip.BestSpeed)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: "disk/", Typeflag: tar.TypeDir, Mode: 0o555},
		{Name: "disk/" + filepath.Base(disk), Typeflag: tar.TypeReg, Mode: 0o440, Size: st.Size()},
	} {
		h.Uid, h.Gid, h.ModTime, h.Format = qemuUID, qemuUID, created, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return "", err
		}
	}
	if n, err := io.Copy(tw, in); err != nil || n != st.Size() {
		return "", errors.Join(err, fmt.Errorf("%s: copied %d of %d bytes", disk, n, st.Size()))
	}
	for _, c := range []io.Closer{tw, zw, out} {
		if err := c.Close(); err != nil {
			return "", err
		}
	}
	ok = true
	return out.Name(), nil
}

// filesImage builds a small image from files on this machine (--file SRC:DST, mode from SRC)
// with an entrypoint: the boot test's stand-in model server.
func filesImage(args []string) (string, string, string, error) {
	fs := flag.NewFlagSet("files", flag.ContinueOnError)
	var f imageFlags
	f.register(fs, "")
	var files []string
	fs.Func("file", "SRC:DST, a file of this machine at an absolute path in the image (repeatable)", func(s string) error {
		files = append(files, s)
		return nil
	})
	entrypoint := fs.String("entrypoint", "", "the entrypoint, an absolute path in the image")
	title := fs.String("title", "", "the image's title (a label)")
	if err := fs.Parse(args); err != nil {
		return "", "", "", err
	}
	created, err := f.check()
	if err != nil {
		return "", "", "", err
	}
	if f.repository == "" || len(files) == 0 || !strings.HasPrefix(*entrypoint, "/") {
		return "", "", "", errors.New("--repository, --file and an absolute --entrypoint are required")
	}
	var entries []file
	dirs := map[string]bool{}
	sort.Strings(files)
	for _, spec := range files {
		src, dst, ok := strings.Cut(spec, ":")
		if !ok || !strings.HasPrefix(dst, "/") || strings.HasSuffix(dst, "/") {
			return "", "", "", fmt.Errorf("--file %q: want SRC:DST with DST an absolute file path", spec)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return "", "", "", err
		}
		st, err := os.Stat(src)
		if err != nil {
			return "", "", "", err
		}
		var parents []string
		for d := path.Dir(dst); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			entries = append(entries, file{name: d + "/", mode: 0o755})
		}
		entries = append(entries, file{name: dst, mode: int64(st.Mode().Perm()), data: data})
	}
	layer, err := layerTar(created, entries...)
	if err != nil {
		return "", "", "", err
	}
	img, err := layered(created, "image files", []string{*title}, layer)
	if err != nil {
		return "", "", "", err
	}
	return f.finish(img, created, *title, *title, v1.Config{Entrypoint: []string{*entrypoint}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
}
