package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// static holds the front-end files: ours (console.css, *.js) and vendor/, which
// hack/console-assets.sh writes from the npm packages package-lock.json pins.
//
//go:embed static
var static embed.FS

// assetFile is one embedded file, ready to serve.
type assetFile struct {
	body, gz    []byte
	contentType string
	version     string // the first 12 hex digits of its SHA-256
}

// assets serves /static/<name>?v=<version>: a request naming the current version is cached by
// the browser for a year (immutable: a new build names a new version), any other is answered
// with the current file and no-cache. Text files are gzipped once, at start.
type assets struct {
	files map[string]*assetFile
}

func loadAssets() (*assets, error) {
	a := &assets{files: map[string]*assetFile{}}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := strings.TrimPrefix(p, "static/")
		if strings.HasPrefix(path.Base(name), "LICENSE") {
			// Served too (the licences travel with the files), as text.
			return a.add(name, "text/plain; charset=utf-8")
		}
		ct := mime.TypeByExtension(path.Ext(name))
		switch path.Ext(name) {
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		if ct == "" {
			return fmt.Errorf("console: no content type for static/%s", name)
		}
		return a.add(name, ct)
	})
	if err != nil {
		return nil, err
	}
	return a, a.join(htmxBundle, "vendor/htmx.min.js", "vendor/hx-sse.min.js")
}

// htmxBundle is htmx and its SSE extension in one file, so that pages can load it deferred
// (off the first render's path): htmx run deferred finds the page parsed and starts at its
// next task, which may come before a separate extension script has arrived (the jobs list then
// never connects its stream); in one file, the extension registers in the same task as htmx.
const htmxBundle = "vendor/htmx+hx-sse.js"

// join serves the named files one after the other as one more file, name.
func (a *assets) join(name string, parts ...string) error {
	var body []byte
	for _, p := range parts {
		f, ok := a.files[p]
		if !ok {
			return fmt.Errorf("console: no static file %q to put in %s", p, name)
		}
		body = append(append(body, f.body...), ";\n"...)
	}
	a.addBody(name, a.files[parts[0]].contentType, body)
	return nil
}

func (a *assets) add(name, ct string) error {
	body, err := static.ReadFile("static/" + name)
	if err != nil {
		return err
	}
	a.addBody(name, ct, body)
	return nil
}

func (a *assets) addBody(name, ct string, body []byte) {
	sum := sha256.Sum256(body)
	f := &assetFile{body: body, contentType: ct, version: hex.EncodeToString(sum[:6])}
	if strings.HasPrefix(ct, "text/") || ct == "image/svg+xml" {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		if buf.Len() < len(body) {
			f.gz = buf.Bytes()
		}
	}
	a.files[name] = f
}

// URL is the versioned URL of an embedded file (what templates link to).
func (a *assets) URL(name string) (string, error) {
	f, ok := a.files[name]
	if !ok {
		return "", fmt.Errorf("console: no static file %q", name)
	}
	return "/static/" + name + "?v=" + f.version, nil
}

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files[strings.TrimPrefix(r.URL.Path, "/static/")]
	if !ok {
		http.Error(w, "404 not found", http.StatusNotFound)
		return
	}
	a.serve(w, r, f)
}

func (a *assets) serve(w http.ResponseWriter, r *http.Request, f *assetFile) {
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("Vary", "Accept-Encoding")
	if r.URL.Query().Get("v") == f.version {
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		hd.Set("Cache-Control", "no-cache")
	}
	hd.Set("ETag", `"`+f.version+`"`)
	if match := r.Header.Get("If-None-Match"); match == `"`+f.version+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := f.body
	if f.gz != nil && acceptsGzip(r) {
		hd.Set("Content-Encoding", "gzip")
		body = f.gz
	}
	hd.Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// favicon answers the browser's own request for /favicon.ico (pages link the SVG icon, but a
// browser may still ask): the same icon.
func (a *assets) favicon(w http.ResponseWriter, r *http.Request) {
	a.serve(w, r, a.files["favicon.svg"])
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}
