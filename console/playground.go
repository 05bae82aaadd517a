package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"time"
)

// The playground talks to a tenant's endpoint through the gateway, as any client would, with
// the API key the user pastes (or has just minted). The console relays the request and the
// streamed answer; the key goes upstream in the Authorization header and is never stored,
// logged or put in a page. Relaying (rather than the browser calling the endpoint itself)
// keeps the console's CSP at connect-src 'self' and needs no CORS on the gateway.

type playgroundData struct {
	Jobs       []Job
	Configured bool
}

func (h *Handler) playground(c *call) {
	jobs, err := h.opts.Backend.ListJobs(c.r.Context(), c.id, c.tenant)
	if err != nil {
		h.backendError(c.w, c.r, err)
		return
	}
	var withEndpoint []Job
	for _, j := range jobs {
		if j.Endpoint != "" {
			withEndpoint = append(withEndpoint, j)
		}
	}
	v := h.viewFor(c, "Playground", "playground", playgroundData{Jobs: withEndpoint, Configured: h.opts.Gateway != nil})
	v.Scripts = []string{"playground.js"}
	h.render(c.w, c.r, http.StatusOK, "playground", v)
}

// chatRequest is what playground.js posts.
type chatRequest struct {
	Key      string `json:"key"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// upstream finds the job's endpoint; false when it answered already.
func (h *Handler) upstream(c *call) (*JobDetail, bool) {
	if h.opts.Gateway == nil {
		h.fail(c.w, c.r, http.StatusServiceUnavailable, "The playground is not configured on this server (no gateway to reach the endpoints).")
		return nil, false
	}
	j, err := h.opts.Backend.GetJob(c.r.Context(), c.id, c.tenant, c.r.PathValue("job"))
	if err != nil {
		h.backendError(c.w, c.r, err)
		return nil, false
	}
	if j.Endpoint == "" {
		h.fail(c.w, c.r, http.StatusConflict, "This job has no endpoint URL yet.")
		return nil, false
	}
	return j, true
}

// playgroundChat relays a chat completion, streamed token by token (the endpoint's own
// server-sent events, passed through as they come).
func (h *Handler) playgroundChat(c *call) {
	j, ok := h.upstream(c)
	if !ok {
		return
	}
	var in chatRequest
	if err := json.NewDecoder(io.LimitReader(c.r.Body, 1<<20)).Decode(&in); err != nil || len(in.Messages) == 0 {
		h.fail(c.w, c.r, http.StatusBadRequest, "Send JSON with a key and at least one message.")
		return
	}
	body, _ := json.Marshal(map[string]any{"model": firstNonEmpty(j.Master.Model, j.Model), "messages": in.Messages, "stream": true})
	h.relay(c, j.Endpoint+"/v1/chat/completions", in.Key, "application/json", bytes.NewReader(body))
}

// playgroundTranscribe relays an uploaded audio file to the endpoint's transcriptions.
func (h *Handler) playgroundTranscribe(c *call) {
	j, ok := h.upstream(c)
	if !ok {
		return
	}
	if err := c.r.ParseMultipartForm(32 << 20); err != nil {
		h.fail(c.w, c.r, http.StatusBadRequest, "Send a form with a key and an audio file (at most 32 MiB).")
		return
	}
	file, hdr, err := c.r.FormFile("file")
	if err != nil {
		h.fail(c.w, c.r, http.StatusBadRequest, "Choose an audio file.")
		return
	}
	defer file.Close()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("model", firstNonEmpty(j.Master.Model, j.Model))
	fw, _ := mw.CreateFormFile("file", hdr.Filename)
	if _, err := io.Copy(fw, file); err != nil {
		h.fail(c.w, c.r, http.StatusBadRequest, "The file could not be read.")
		return
	}
	_ = mw.Close()
	h.relay(c, j.Endpoint+"/v1/audio/transcriptions", c.r.FormValue("key"), mw.FormDataContentType(), &buf)
}

// relay sends the request through the gateway with the user's key and copies the answer back
// as it arrives.
func (h *Handler) relay(c *call, target, key, contentType string, body io.Reader) {
	key = strings.TrimSpace(key)
	ctx, cancel := context.WithTimeout(c.r.Context(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, body)
	if err != nil {
		h.fail(c.w, c.r, http.StatusBadRequest, "The endpoint's URL is not valid.")
		return
	}
	req.Header.Set("Content-Type", contentType)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := h.opts.Gateway.RoundTrip(req)
	if err != nil {
		h.log.Warn("playground: the endpoint could not be reached", "endpoint", target, "error", err)
		h.fail(c.w, c.r, http.StatusBadGateway, fmt.Sprintf("The endpoint could not be reached: %v", err))
		return
	}
	defer resp.Body.Close()
	hd := c.w.Header()
	// Only the types an OpenAI endpoint answers with are passed on: nothing the endpoint sends
	// is ever served as a page of the console's origin.
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"), strings.HasPrefix(ct, "application/json"):
	default:
		ct = "text/plain; charset=utf-8"
	}
	hd.Set("Content-Type", ct)
	hd.Set("Cache-Control", "no-store")
	c.w.WriteHeader(resp.StatusCode)
	fl, _ := c.w.(http.Flusher)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := c.w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
