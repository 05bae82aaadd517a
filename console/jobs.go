package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/sleep"
)

// jobsData is the live part of the jobs page (the "jobs-live" template): what the stream
// sends again whenever it changes.
type jobsData struct {
	Tenant  string
	Jobs    []Job
	Now     time.Time
	Err     string
	CanEdit bool
}

func (h *Handler) jobsData(c *call) jobsData {
	jobs, err := h.opts.Backend.ListJobs(c.r.Context(), c.id, c.tenant)
	return h.jobsDataOf(c, jobs, err)
}

// jobsDataOf is the live part of the jobs page from a read of the list.
func (h *Handler) jobsDataOf(c *call, jobs []Job, err error) jobsData {
	d := jobsData{Tenant: c.tenant, Now: h.now(), CanEdit: h.can(c, access.WriteJobs)}
	if err != nil {
		h.log.Warn("console: listing jobs", "tenant", c.tenant, "error", err)
		d.Err = "The jobs could not be read just now; the list shows what was last read."
		if p := (*Problem)(nil); errors.As(err, &p) {
			d.Err = problemText(p)
		}
	}
	d.Jobs = jobs
	return d
}

// liveFragment renders the jobs list's live part and its tag (a hash of the HTML).
func (h *Handler) liveFragment(d jobsData) ([]byte, string, error) {
	var buf bytes.Buffer
	if err := h.pages.byName["jobs"].ExecuteTemplate(&buf, "jobs-live", d); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:8]), nil
}

// jobsPage is the jobs page (jobs) with its list read at the same time as the caller's
// memberships (tenant's Me): the two reads of the page's first render, which do not depend on
// each other, made at once. The list is read as the caller, so the API decides who may read it
// as for any read; for a caller who is no member of the tenant, tenant answers 404 as for every
// tenant page and the list's read is cancelled, its answer never shown.
func (h *Handler) jobsPage() http.Handler {
	type read struct {
		jobs []Job
		err  error
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		got := make(chan read, 1)
		go func() {
			jobs, err := h.opts.Backend.ListJobs(ctx, sessionOf(ctx).Identity.identity(), r.PathValue("tenant"))
			got <- read{jobs, err}
		}()
		h.tenant(access.Read, func(c *call) {
			l := <-got
			h.jobs(c, h.jobsDataOf(c, l.jobs, l.err))
		}).ServeHTTP(w, r)
	})
}

// jobs is the tenant's jobs: stage badge, reason and since, kept current by a server-sent
// event stream (jobEvents) that htmx swaps in.
func (h *Handler) jobs(c *call, d jobsData) {
	live, tag, err := h.liveFragment(d)
	if err != nil {
		h.internal(c.w, c.r, "render jobs", err)
		return
	}
	// The page holds the fragment the tag was taken of, rendered once: it is html/template's
	// output in the same context (the inside of a <div>) as the page would render it in.
	v := h.viewFor(c, "Jobs", "jobs", struct {
		Live   template.HTML
		Events string
	}{template.HTML(live), "/t/" + url.PathEscape(c.tenant) + "/jobs/events?since=" + tag})
	v.Scripts = []string{htmxBundle}
	h.render(c.w, c.r, http.StatusOK, "jobs", v)
}

// jobEvents streams the jobs list (text/event-stream): every LiveInterval it reads the jobs
// and sends the list's HTML when it differs from what the page last got (the event id is its
// tag, so a reconnecting stream sends nothing until something changes). The stream ends when
// the session's ID token expires, so that the reconnect goes through the refresh.
func (h *Handler) jobEvents(c *call) {
	w, r := c.w, c.r
	fl, ok := w.(http.Flusher)
	if !ok {
		h.internal(w, r, "jobs stream", errors.New("the response writer cannot flush"))
		return
	}
	last := firstNonEmpty(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("since"))
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // proxies that buffer would hold the events back
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", (2 * h.opts.LiveInterval).Milliseconds())
	fl.Flush()
	ctx, cancel := h.untilShutdown(r.Context())
	defer cancel()
	idle, first := 0, true
	_ = sleep.Poll(ctx, h.opts.LiveInterval, func(context.Context) bool {
		if !first && !h.now().Before(c.sess.Expiry) {
			return true
		}
		first = false
		body, tag, err := h.liveFragment(h.jobsData(c))
		if err != nil {
			h.log.Error("console: rendering the jobs stream", "error", err)
			return true
		}
		if tag != last {
			writeEvent(w, tag, body)
			last, idle = tag, 0
			fl.Flush()
		} else if idle++; idle*int(h.opts.LiveInterval) >= int(15*time.Second) {
			_, _ = w.Write([]byte(": still here\n\n")) // keeps proxies from closing an idle stream
			idle = 0
			fl.Flush()
		}
		return false
	})
}

// untilShutdown is parent, ended also when the server shuts down (h.done): a stream's context.
func (h *Handler) untilShutdown(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-h.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// writeEvent writes one unnamed event: htmx's SSE extension swaps its data into the element.
// Every line of the body is a data line of its own: an event stream ends a line at CR, LF or
// CRLF, so a CR inside the data (a reason the clusters wrote) must not end it, or the text
// after it would be read as a field of the stream (an id, an event name) rather than data.
func writeEvent(w http.ResponseWriter, id string, body []byte) {
	var b bytes.Buffer
	b.WriteString("id: " + id + "\n")
	for _, line := range sseLines(bytes.TrimRight(body, "\r\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, _ = w.Write(b.Bytes())
}

// sseLines splits b at CRLF, CR and LF, as an event stream's reader does.
func sseLines(b []byte) [][]byte {
	return bytes.Split(bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n")), []byte("\n"))
}

// createForm is the create-a-job form: what was typed, and the problems found.
type createForm struct {
	Name, Model, Variant, NodeType, GPUCount, Replicas, ModelCacheSize string
	RequireAPIKey                                                      bool
	// Errors are problems by form field; Other are those of no field of the form.
	Errors  map[string][]string
	Other   []string
	Preview string
	Path    string
	Models  *ModelList
}

func (h *Handler) newJob(c *call) {
	h.showCreate(c, http.StatusOK, createForm{Replicas: "1", RequireAPIKey: true})
}

func (h *Handler) showCreate(c *call, status int, f createForm) {
	if f.Models == nil {
		m, err := h.opts.Backend.Models(c.r.Context(), c.id, c.tenant)
		if err != nil {
			h.backendError(c.w, c.r, err)
			return
		}
		f.Models = m
	}
	v := h.viewFor(c, "Create a job", "new", f)
	v.Scripts = []string{"create.js"}
	h.render(c.w, c.r, status, "create", v)
}

// createJob previews (intent=preview) or creates the job; a refusal is shown next to each
// field it names.
func (h *Handler) createJob(c *call) {
	r := c.r
	f := createForm{Name: strings.TrimSpace(r.PostFormValue("name")), Model: strings.TrimSpace(r.PostFormValue("model")),
		Variant: strings.TrimSpace(r.PostFormValue("variant")), NodeType: r.PostFormValue("nodeType"),
		GPUCount: strings.TrimSpace(r.PostFormValue("gpuCount")), Replicas: strings.TrimSpace(r.PostFormValue("replicas")),
		ModelCacheSize: strings.TrimSpace(r.PostFormValue("modelCacheSize")), RequireAPIKey: r.PostFormValue("requireApiKey") == "on",
		Errors: map[string][]string{}}
	req := JobCreate{Name: f.Name, Model: f.Model, Variant: f.Variant, NodeType: f.NodeType, ModelCacheSize: f.ModelCacheSize}
	req.RequireAPIKey = &f.RequireAPIKey
	req.GPUCount = f.number("gpuCount", f.GPUCount)
	req.Replicas = f.number("replicas", f.Replicas)
	if f.Name == "" {
		f.Errors["name"] = append(f.Errors["name"], "A job needs a name (lower-case letters, digits and dashes).")
	}
	if f.Model == "" {
		f.Errors["model"] = append(f.Errors["model"], "Pick a model.")
	}
	if len(f.Errors) > 0 {
		h.showCreate(c, http.StatusUnprocessableEntity, f)
		return
	}
	if r.PostFormValue("intent") == "preview" {
		f.Path, f.Preview = preview(c.tenant, req)
		h.showCreate(c, http.StatusOK, f)
		return
	}
	job, err := h.opts.Backend.CreateJob(r.Context(), c.id, c.tenant, req)
	var p *Problem
	if errors.As(err, &p) && p.Status != http.StatusNotFound && p.Status != http.StatusForbidden {
		f.place(p)
		h.showCreate(c, p.Status, f)
		return
	}
	if err != nil {
		h.backendError(c.w, r, err)
		return
	}
	http.Redirect(c.w, r, "/t/"+url.PathEscape(c.tenant)+"/jobs/"+url.PathEscape(job.Name)+"?created=1", http.StatusSeeOther)
}

// formFields are the form's fields, by the last element of the API's and the job file's paths.
var formFields = map[string]string{"name": "name", "model": "model", "variant": "variant", "nodeType": "nodeType",
	"gpuCount": "gpuCount", "replicas": "replicas", "modelCacheSize": "modelCacheSize", "requireApiKey": "requireApiKey",
	"requireAPIKey": "requireApiKey"}

// place puts each of a refusal's problems next to its field (spec.gpuCount, body.gpuCount and
// gpuCount all go to gpuCount); the rest above the form.
func (f *createForm) place(p *Problem) {
	for _, fp := range p.Fields {
		path := fp.Field
		if i := strings.LastIndex(path, "."); i >= 0 {
			path = path[i+1:]
		}
		if field, ok := formFields[path]; ok && fp.Field != "" {
			f.Errors[field] = append(f.Errors[field], fp.Message)
			continue
		}
		f.Other = append(f.Other, fp.Message)
	}
	if len(p.Fields) == 0 || len(f.Other) > 0 || len(f.Errors) == 0 {
		f.Other = append([]string{p.Detail}, f.Other...)
	}
}

func (f *createForm) number(field, s string) int32 {
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		f.Errors[field] = append(f.Errors[field], fmt.Sprintf("%q is not a whole number of 0 or more.", s))
		return 0
	}
	return int32(n)
}

// preview is the job file the create would commit (before the defaults the API derives).
func preview(tenant string, req JobCreate) (string, string) {
	j := v1alpha1.ManagedInferenceJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ManagedInferenceJob"},
		ObjectMeta: metav1.ObjectMeta{Name: req.Name},
		Spec: v1alpha1.ManagedInferenceJobSpec{Model: req.Model, Variant: req.Variant, NodeType: req.NodeType,
			GPUCount: req.GPUCount, Replicas: req.Replicas, ModelCacheSize: req.ModelCacheSize, RequireAPIKey: req.RequireAPIKey},
	}
	b, err := yaml.Marshal(j)
	if err != nil {
		return "", err.Error()
	}
	return "tenants/" + tenant + "/jobs/" + req.Name + ".yaml", string(b)
}

// jobDetail is the job page's data.
type jobDetail struct {
	Job     *JobDetail
	Now     time.Time
	Created bool
	Curl    string
	Python  string
	// Logs is the log pane's: its stream, the replicas and node ranks it may narrow to, and
	// how many lines it keeps.
	Logs logPane
}

type logPane struct {
	Events          string
	Replicas, Nodes []int32
	Max             int
}

func newLogPane(tenant string, j *JobDetail) logPane {
	p := logPane{Events: "/t/" + url.PathEscape(tenant) + "/jobs/" + url.PathEscape(j.Name) + "/logs/events", Max: LogPaneMax}
	for r := range j.Replicas {
		p.Replicas = append(p.Replicas, r)
	}
	for n := range max(j.NodesPerReplica, 1) {
		p.Nodes = append(p.Nodes, n)
	}
	return p
}

func (h *Handler) job(c *call) {
	j, err := h.opts.Backend.GetJob(c.r.Context(), c.id, c.tenant, c.r.PathValue("job"))
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	d := jobDetail{Job: j, Now: h.now(), Created: c.r.URL.Query().Get("created") == "1", Logs: newLogPane(c.tenant, j)}
	d.Curl, d.Python = snippets(j)
	v := h.viewFor(c, j.Name, "jobs", d)
	v.Scripts, v.Styles = []string{"logs.js"}, []string{"logs.css"}
	h.render(c.w, c.r, http.StatusOK, "job", v)
}

// snippets are a ready-to-paste curl command and openai-python program for the endpoint.
func snippets(j *JobDetail) (string, string) {
	if j.Endpoint == "" {
		return "", ""
	}
	model := firstNonEmpty(j.Master.Model, j.Model)
	if j.Runtime == "parakeet" {
		return fmt.Sprintf("curl %s/v1/audio/transcriptions \\\n  -H \"Authorization: Bearer $INFERPLANE_API_KEY\" \\\n  -F model=%s \\\n  -F file=@audio.wav", j.Endpoint, model),
			fmt.Sprintf("import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url=%q, api_key=os.environ[\"INFERPLANE_API_KEY\"])\nwith open(\"audio.wav\", \"rb\") as f:\n    print(client.audio.transcriptions.create(model=%q, file=f).text)\n", j.Endpoint+"/v1", model)
	}
	return fmt.Sprintf("curl %s/v1/chat/completions \\\n  -H \"Authorization: Bearer $INFERPLANE_API_KEY\" \\\n  -H \"Content-Type: application/json\" \\\n  -d '{\"model\": %q, \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'", j.Endpoint, model),
		fmt.Sprintf("import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url=%q, api_key=os.environ[\"INFERPLANE_API_KEY\"])\nreply = client.chat.completions.create(\n    model=%q,\n    messages=[{\"role\": \"user\", \"content\": \"Hello\"}],\n)\nprint(reply.choices[0].message.content)\n", j.Endpoint+"/v1", model)
}

// confirm is a confirmation page: what the action does, what it keeps and what it removes.
type confirm struct {
	Action, Heading, Button string
	Does, Keeps, Removes    []string
	Cancel                  string
	Fields                  map[string]string
	Danger                  bool
}

func (h *Handler) confirmRestart(c *call) {
	j, err := h.opts.Backend.GetJob(c.r.Context(), c.id, c.tenant, c.r.PathValue("job"))
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	what := "every replica of " + j.Name
	fields := map[string]string{}
	if rep := c.r.URL.Query().Get("replica"); rep != "" {
		if _, err := strconv.ParseInt(rep, 10, 32); err != nil {
			h.fail(c.w, c.r, http.StatusBadRequest, "The replica must be a number.")
			return
		}
		what, fields["replica"] = "replica "+rep+" of "+j.Name, rep
	}
	base := "/t/" + url.PathEscape(c.tenant) + "/jobs/" + url.PathEscape(j.Name)
	h.render(c.w, c.r, http.StatusOK, "confirm", h.viewFor(c, "Restart "+j.Name, "jobs", confirm{
		Action: base + "/restart", Heading: "Restart " + what + "?", Button: "Restart", Cancel: base, Fields: fields,
		Does:  []string{"Stops and starts the virtual machines of " + what + "; the endpoint serves from the other replicas meanwhile, if any."},
		Keeps: []string{"The model cache (each replica's storage): the model is not downloaded again.", "The job's settings, its endpoint and its API keys."},
	}))
}

func (h *Handler) restartJob(c *call) {
	var replica *int32
	if rep := c.r.PostFormValue("replica"); rep != "" {
		n, err := strconv.ParseInt(rep, 10, 32)
		if err != nil {
			h.fail(c.w, c.r, http.StatusBadRequest, "The replica must be a number.")
			return
		}
		n32 := int32(n)
		replica = &n32
	}
	job := c.r.PathValue("job")
	if err := h.opts.Backend.RestartJob(c.r.Context(), c.id, c.tenant, job, replica); err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	http.Redirect(c.w, c.r, "/t/"+url.PathEscape(c.tenant)+"/jobs/"+url.PathEscape(job), http.StatusSeeOther)
}

func (h *Handler) confirmDelete(c *call) {
	j, err := h.opts.Backend.GetJob(c.r.Context(), c.id, c.tenant, c.r.PathValue("job"))
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	base := "/t/" + url.PathEscape(c.tenant) + "/jobs/" + url.PathEscape(j.Name)
	h.render(c.w, c.r, http.StatusOK, "confirm", h.viewFor(c, "Delete "+j.Name, "jobs", confirm{
		Action: base + "/delete", Heading: "Delete " + j.Name + "?", Button: "Delete " + j.Name, Cancel: base, Danger: true,
		Does:    []string{"Removes the job from the tenant's inputs (a git commit in your name); Argo CD then removes what ran it."},
		Removes: []string{"The endpoint " + firstNonEmpty(j.Endpoint, j.Name) + ": it stops answering.", "Its virtual machines and their model cache (storage)."},
		Keeps:   []string{"The tenant's API keys and the usage recorded so far.", "The job in the inputs' git history."},
	}))
}

func (h *Handler) deleteJob(c *call) {
	if err := h.opts.Backend.DeleteJob(c.r.Context(), c.id, c.tenant, c.r.PathValue("job")); err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	http.Redirect(c.w, c.r, "/t/"+url.PathEscape(c.tenant)+"/jobs", http.StatusSeeOther)
}
