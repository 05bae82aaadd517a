package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inferplane/inferplane/access"
)

//go:embed templates
var templateFS embed.FS

// pages are the parsed templates: each page file with the layout and the partials.
type pages struct {
	byName map[string]*template.Template
}

func parsePages(a *assets) (*pages, error) {
	funcs := template.FuncMap{
		"asset":      a.URL,
		"when":       when,
		"datetime":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago":        ago,
		"stageClass": stageClass,
		"pct":        func(f *float64) string { return fmtOpt(f, 100, "%.1f %%") },
		"ms":         func(f *float64) string { return fmtOpt(f, 1, "%.0f ms") },
		"json":       toJSONString,
		"join":       strings.Join,
		"meter":      meter,
		"deref":      func(t *time.Time) time.Time { return *t },
	}
	base, err := template.New("base").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, err
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" || name == "partials" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, f)
		if err != nil {
			return nil, err
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every page's template gets.
type view struct {
	Title string
	// Section is the navigation entry the page belongs to (aria-current).
	Section string
	Signed  bool
	User    access.Identity
	// Operator: a member of the operator's admin groups (sees the fleet and every tenant).
	Operator bool
	Tenant   string
	// NavTenant is the tenant the navigation links to: the page's, else the caller's first.
	NavTenant string
	Role      string
	Members   []access.Membership
	CSRF      string
	// Scripts and Styles are the page's own static files, beyond the layout's.
	Scripts, Styles []string
	// Can says which controls to show (the Backend decides again on use).
	Can struct{ WriteJobs, WriteKeys bool }
	// Status and Message are an error page's.
	Status  int
	Message string
	Data    any
}

// viewFor fills the parts of a view every page of a tenant has.
func (h *Handler) viewFor(c *call, title, section string, data any) *view {
	v := &view{Title: title, Section: section, Signed: true, User: c.id, Operator: c.operator, Tenant: c.tenant,
		NavTenant: c.tenant, Members: c.members, CSRF: c.sess.CSRF, Data: data}
	if v.NavTenant == "" && len(c.members) > 0 {
		v.NavTenant = c.members[0].Tenant
	}
	if i := slices.IndexFunc(c.members, func(m access.Membership) bool { return m.Tenant == v.NavTenant }); i >= 0 {
		role := c.members[i].Role
		v.Role = string(role)
		v.Can.WriteJobs = allows(role, access.WriteJobs)
		v.Can.WriteKeys = allows(role, access.WriteKeys)
	}
	return v
}

// render writes a page: rendered to a buffer first, so a template error is a clean 500.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, v *view) {
	var buf bytes.Buffer
	t, ok := h.pages.byName[name]
	if !ok {
		h.internal(w, r, "render", fmt.Errorf("no template %q", name))
		return
	}
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		h.internal(w, r, "render "+name, err)
		return
	}
	writeHTML(w, status, buf.Bytes())
}

func writeHTML(w http.ResponseWriter, status int, body []byte) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	// Pages carry the user's data (and a key once): never cached, nor kept for the back button.
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// fail answers an error: a page for a browser's navigation, plain text for a script's call.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if isStream(r) || r.Header.Get(CSRFHeader) != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, msg+"\n")
		return
	}
	v := &view{Title: http.StatusText(status), Status: status, Message: msg}
	if s := sessionOf(r.Context()); s != nil {
		v.Signed, v.User, v.CSRF = true, s.Identity.identity(), s.CSRF
	}
	h.render(w, r, status, "error", v)
}

func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, http.StatusNotFound, "There is no such page, or you have no access to it.")
}

func (h *Handler) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	h.log.Error("console: "+what, "path", r.URL.Path, "error", err)
	w.Header().Del("Set-Cookie")
	if what == "render" || strings.HasPrefix(what, "render ") {
		// The error page is a template too: answer plainly.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "Something went wrong on our side; the server's log says what.\n")
		return
	}
	h.fail(w, r, http.StatusInternalServerError, "Something went wrong on our side; the server's log says what.")
}

// statusError is an error that names its HTTP status (the API's problem type and huma's).
type statusError interface{ GetStatus() int }

// backendError answers a Backend's refusal: ErrNotFound is a 404, a *Problem (or any error
// naming its status) its status and words, anything else a 500 whose details stay in the log.
func (h *Handler) backendError(w http.ResponseWriter, r *http.Request, err error) {
	var p *Problem
	var se statusError
	switch {
	case errors.Is(err, ErrNotFound):
		h.notFound(w, r)
	case errors.As(err, &p):
		if p.Status == http.StatusNotFound {
			h.notFound(w, r)
			return
		}
		h.fail(w, r, p.Status, problemText(p))
	case errors.As(err, &se) && se.GetStatus() >= 400 && se.GetStatus() < 500:
		h.fail(w, r, se.GetStatus(), err.Error())
	default:
		h.internal(w, r, "backend", err)
	}
}

// problemText is a Problem in words: its detail, then each field's problem.
func problemText(p *Problem) string {
	parts := []string{p.Detail}
	for _, f := range p.Fields {
		parts = append(parts, f.Message)
	}
	return strings.Join(parts, " ")
}

// cspReports counts the CSP violation reports browsers sent (for tests and the log).
var cspReports atomic.Int64

// CSPReports is how many Content-Security-Policy violation reports this process has received.
func CSPReports() int64 { return cspReports.Load() }

// cspReport takes a browser's violation report (POST /csp-report): logged, at most 8 KiB read.
func (h *Handler) cspReport(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<10))
	cspReports.Add(1)
	var rep struct {
		Report struct {
			Document  string `json:"document-uri"`
			Directive string `json:"violated-directive"`
			Blocked   string `json:"blocked-uri"`
		} `json:"csp-report"`
	}
	_ = json.Unmarshal(body, &rep)
	h.log.Warn("content security policy violation", "document", rep.Report.Document, "directive", rep.Report.Directive, "blocked", rep.Report.Blocked)
	w.WriteHeader(http.StatusNoContent)
}

// Template helpers.

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// ago is coarse on purpose (minutes, hours, days): the live jobs list sends a change only when
// what it shows changes, and seconds would change it every time.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < time.Hour:
		return plural(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return plural(int(d/time.Hour), "hour")
	}
	return plural(int(d/(24*time.Hour)), "day")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func stageClass(stage string) string {
	switch stage {
	case "serving":
		return "ok"
	case "failed", "crash-looping":
		return "bad"
	case "unknown", "":
		return "unknown"
	}
	return "progress"
}

func fmtOpt(f *float64, scale float64, format string) string {
	if f == nil || math.IsNaN(*f) {
		return "—"
	}
	return fmt.Sprintf(format, *f*scale)
}

func toJSONString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// meter is a quota's use as a percentage for <meter> and text (0 when no quota is set).
func meter(inUse, quota int64) int64 {
	if quota <= 0 {
		return 0
	}
	return min(100, inUse*100/quota)
}
