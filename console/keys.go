package console

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// keysData is the API keys page: the list, the form and, right after a create, the key itself
// (in that one answer, never stored by the console).
type keysData struct {
	Keys      []Key
	Endpoints []string
	Created   *KeyCreated
	Form      KeyCreate
	Errors    []string
	Now       time.Time
}

func (h *Handler) keysPage(c *call, status int, d keysData) {
	keys, err := h.opts.Backend.ListKeys(c.r.Context(), c.id, c.tenant)
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	jobs, err := h.opts.Backend.ListJobs(c.r.Context(), c.id, c.tenant)
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	for _, j := range jobs {
		d.Endpoints = append(d.Endpoints, j.Name)
	}
	slices.SortFunc(keys, func(a, b Key) int { return b.CreatedAt.Compare(a.CreatedAt) })
	d.Keys, d.Now = keys, h.now()
	h.render(c.w, c.r, status, "keys", h.viewFor(c, "API keys", "keys", d))
}

func (h *Handler) keys(c *call) { h.keysPage(c, http.StatusOK, keysData{}) }

// createKey mints a key and shows it once on the answer to the form's post (not a redirect:
// the key must not sit in a URL or be fetched again).
func (h *Handler) createKey(c *call) {
	req := KeyCreate{Name: strings.TrimSpace(c.r.PostFormValue("name")), Endpoint: c.r.PostFormValue("endpoint"),
		Expires: strings.TrimSpace(c.r.PostFormValue("expires"))}
	k, err := h.opts.Backend.CreateKey(c.r.Context(), c.id, c.tenant, req)
	var p *Problem
	if errors.As(err, &p) && (p.Status == http.StatusUnprocessableEntity || p.Status == http.StatusBadRequest || p.Status == http.StatusConflict) {
		h.keysPage(c, p.Status, keysData{Form: req, Errors: strings.Split(problemText(p), "\n")})
		return
	}
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	h.keysPage(c, http.StatusCreated, keysData{Created: k})
}

func (h *Handler) confirmRevoke(c *call) {
	id := c.r.PathValue("key")
	keys, err := h.opts.Backend.ListKeys(c.r.Context(), c.id, c.tenant)
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	i := slices.IndexFunc(keys, func(k Key) bool { return k.ID == id })
	if i < 0 {
		h.notFound(c.w, c.r)
		return
	}
	name := keys[i].ID
	if keys[i].Name != "" {
		name = keys[i].Name + " (" + keys[i].ID + ")"
	}
	base := "/t/" + url.PathEscape(c.tenant) + "/keys"
	h.render(c.w, c.r, http.StatusOK, "confirm", h.viewFor(c, "Revoke a key", "keys", confirm{
		Action: base + "/" + url.PathEscape(id) + "/revoke", Heading: "Revoke the key " + name + "?", Button: "Revoke", Cancel: base, Danger: true,
		Does:    []string{"Refuses every request made with this key from now on, on every gateway replica. Revocation is final."},
		Keeps:   []string{"The key's record, listed as revoked, and the usage it made."},
		Removes: []string{"Access for whoever holds the key."},
	}))
}

func (h *Handler) revokeKey(c *call) {
	if err := h.opts.Backend.RevokeKey(c.r.Context(), c.id, c.tenant, c.r.PathValue("key")); err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	http.Redirect(c.w, c.r, "/t/"+url.PathEscape(c.tenant)+"/keys", http.StatusSeeOther)
}
