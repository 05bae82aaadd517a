package console

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/inferplane/inferplane/access"
)

// home sends the caller to its first tenant's jobs; with no tenant, it says so and why.
func (h *Handler) home(w http.ResponseWriter, r *http.Request) {
	c, ok := h.newCall(w, r)
	if !ok {
		return
	}
	if len(c.members) > 0 {
		http.Redirect(w, r, "/t/"+url.PathEscape(c.members[0].Tenant)+"/jobs", http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "notenant", h.viewFor(c, "No tenant yet", "", nil))
}

// meData is the "who am I" page.
type meData struct {
	Expiry, Created, Ends time.Time
	Refreshable, Dev      bool
	Roles                 []roleRow
}

type roleRow struct {
	Tenant, Role string
	May          []string
}

// me is "who am I": the identity the provider vouched for, the groups, and what each tenant
// lets the caller do.
func (h *Handler) me(w http.ResponseWriter, r *http.Request) {
	c, ok := h.newCall(w, r)
	if !ok {
		return
	}
	d := meData{Expiry: c.sess.Expiry, Created: c.sess.Created, Ends: c.sess.Created.Add(h.opts.SessionMaxAge),
		Refreshable: c.sess.Refresh != "", Dev: c.sess.Dev}
	for _, m := range c.members {
		row := roleRow{Tenant: m.Tenant, Role: string(m.Role)}
		for _, a := range []access.Action{access.Read, access.WriteJobs, access.WriteKeys, access.ScaleJobs, access.RequestQuota} {
			if rankOf(m.Role) >= rankOf(access.Needs(a)) {
				row.May = append(row.May, actionWords[a])
			}
		}
		d.Roles = append(d.Roles, row)
	}
	h.render(w, r, http.StatusOK, "me", h.viewFor(c, "Who am I", "me", d))
}

var actionWords = map[access.Action]string{
	access.Read:         "read jobs, models, keys, usage and health",
	access.WriteJobs:    "create, restart and delete jobs",
	access.WriteKeys:    "create and revoke API keys",
	access.ScaleJobs:    "change a job's replicas",
	access.RequestQuota: "request GPU quota",
}

func rankOf[T ~string](role T) int {
	return slices.Index([]string{"viewer", "developer", "admin"}, string(role)) + 1
}

// switchTenant is the tenant switcher's form (GET /switch?tenant=T&section=S): the same
// section of another tenant the caller belongs to.
func (h *Handler) switchTenant(w http.ResponseWriter, r *http.Request) {
	c, ok := h.newCall(w, r)
	if !ok {
		return
	}
	t := r.URL.Query().Get("tenant")
	if !slices.ContainsFunc(c.members, func(m access.Membership) bool { return m.Tenant == t }) {
		h.notFound(w, r)
		return
	}
	section := r.URL.Query().Get("section")
	if !slices.Contains([]string{"jobs", "keys", "usage", "playground"}, section) {
		section = "jobs"
	}
	http.Redirect(w, r, "/t/"+url.PathEscape(t)+"/"+section, http.StatusSeeOther)
}

// fleet is the operator's view of every tenant: jobs per stage, GPUs per node type against
// quota. Anyone else gets the 404 every unknown page gets.
func (h *Handler) fleet(w http.ResponseWriter, r *http.Request) {
	c, ok := h.newCall(w, r)
	if !ok {
		return
	}
	if !c.operator {
		h.notFound(w, r)
		return
	}
	f, err := h.opts.Backend.Fleet(r.Context(), c.id)
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "fleet", h.viewFor(c, "Fleet", "fleet", struct {
		Fleet  *Fleet
		Stages []string
	}{f, Stages}))
}

func (h *Handler) signedOut(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "signedout", &view{Title: "Signed out"})
}
