package console

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// recorded reads console/web/assets.sha256: repository path -> SHA-256, in the script's order.
func recorded(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, path, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("%s: not a sha256sum line: %q", file, sc.Text())
		}
		sums[path] = sum
	}
	if len(sums) == 0 {
		t.Fatalf("%s lists no file", file)
	}
	return sums
}

func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestAssetsReproduce checks that the front-end files the console embeds (and the axe-core
// the browser tests inject) are exactly what hack/console-assets.sh makes from the npm
// packages the lock file pins. With node and npm installed it runs the script into a temporary
// folder and compares every file byte for byte (this fetches the pinned packages from the npm
// registry, as `npm ci` does); without them, or with INFERPLANE_ASSETS_OFFLINE=1, it compares
// the committed files with the checksums the script recorded when it last ran. The log says
// which it did.
func TestAssetsReproduce(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	sums := recorded(t, filepath.Join(root, "console/web/assets.sha256"))
	for path, sum := range sums {
		if got := sha(t, filepath.Join(root, path)); got != sum {
			t.Errorf("%s: SHA-256 %s, but hack/console-assets.sh recorded %s: run hack/console-assets.sh rather than editing it", path, got, sum)
		}
	}
	// Nothing in vendor/ that the script did not put there.
	err = fs.WalkDir(static, "static/vendor", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if _, ok := sums["console/"+p]; !ok {
				t.Errorf("console/%s is embedded but hack/console-assets.sh does not make it", p)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	_, nodeErr := exec.LookPath("node")
	_, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil || os.Getenv("INFERPLANE_ASSETS_OFFLINE") == "1" {
		t.Log("node or npm not installed (or INFERPLANE_ASSETS_OFFLINE=1): compared the committed files with the checksums " +
			"hack/console-assets.sh recorded; the files were NOT reproduced from the npm registry in this run")
		return
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack/console-assets.sh"), "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/console-assets.sh --out %s: %v\n%s", out, err, stderr.String())
	}
	for path := range sums {
		want, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(out, path))
		if err != nil {
			t.Fatalf("the script did not make %s: %v", path, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the committed file differs from what hack/console-assets.sh makes (%d bytes, committed %d)", path, len(got), len(want))
		}
	}
	if a, b := sha(t, filepath.Join(out, "console/web/assets.sha256")), sha(t, filepath.Join(root, "console/web/assets.sha256")); a != b {
		t.Error("console/web/assets.sha256 differs from what the script records now")
	}
	t.Logf("ran hack/console-assets.sh (node and npm installed): its %d files equal the committed ones", len(sums))
}

// TestHTMXBundle: htmx and its SSE extension are served as one file, htmx first, so that the
// extension registers in the task htmx is run in, whenever the (deferred) file arrives.
func TestHTMXBundle(t *testing.T) {
	a, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	htmx, sse, bundle := a.files["vendor/htmx.min.js"], a.files["vendor/hx-sse.min.js"], a.files[htmxBundle]
	if bundle == nil {
		t.Fatalf("no %s", htmxBundle)
	}
	i, j := bytes.Index(bundle.body, htmx.body), bytes.Index(bundle.body, sse.body)
	if i != 0 || j <= i {
		t.Errorf("%s: htmx at %d, its extension at %d: want htmx first, then the extension", htmxBundle, i, j)
	}
	if bundle.contentType != htmx.contentType || bundle.gz == nil {
		t.Errorf("%s: served as %q (gzipped: %v), want %q gzipped", htmxBundle, bundle.contentType, bundle.gz != nil, htmx.contentType)
	}
}
