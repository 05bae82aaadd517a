package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// LogPaneTail is how many of each VM's last lines the job page's log pane starts from;
// LogPaneMax is how many lines it keeps in the page (older ones are removed as new ones come).
const (
	LogPaneTail = 200
	LogPaneMax  = 1000
)

// logWriteTimeout bounds each write of the log pane's stream: a browser that stops reading is
// cut off, and the API's reads stop with it.
var logWriteTimeout = 10 * time.Second

// logQuery reads the log pane's filters (replica, node, search) from the query; the error
// says which is wrong.
func logQuery(r *http.Request) (LogQuery, error) {
	tail := int64(LogPaneTail)
	q := LogQuery{Follow: true, Tail: &tail, Search: r.URL.Query().Get("search")}
	if len(q.Search) > 256 {
		return q, errors.New("the search is longer than 256 characters")
	}
	for name, into := range map[string]**int32{"replica": &q.Replica, "node": &q.Node} {
		s := r.URL.Query().Get(name)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 {
			return q, errors.New("the " + name + " must be a number of 0 or more")
		}
		n32 := int32(n)
		*into = &n32
	}
	return q, nil
}

// jobLogEvents streams the job's log to the log pane as server-sent events: each entry one
// event whose data is the LogLine's JSON (the page's script shows it as text, never as
// markup); a refusal or a failure an event named "problem" after which the page stops. Each
// event's id is the entry's time: a browser that reconnects (Last-Event-ID) gets the lines
// after it, none twice. Each write is bounded by logWriteTimeout; an idle stream sends a
// comment every 15 s, so that proxies keep it.
func (h *Handler) jobLogEvents(c *call) {
	w, r := c.w, c.r
	q, err := logQuery(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var after time.Time
	if last, err := time.Parse(time.RFC3339Nano, r.Header.Get("Last-Event-ID")); err == nil {
		after, q.Tail = last, nil
		q.Since = last.UTC().Format(time.RFC3339)
	}
	expiring, stop := context.WithDeadline(r.Context(), c.sess.Expiry) // the reconnect goes through the session's refresh
	defer stop()
	ctx, cancel := h.untilShutdown(expiring)
	defer cancel()
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	send := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if err := rc.SetWriteDeadline(time.Now().Add(logWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send([]byte("retry: 5000\n\n")) != nil {
		return
	}
	kept := make(chan struct{})
	defer func() { cancel(); <-kept }() // no write after the handler returns
	go func() {
		defer close(kept)
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if send([]byte(": still here\n\n")) != nil {
					cancel()
					return
				}
			}
		}
	}()
	err = h.opts.Backend.JobLogs(ctx, c.id, c.tenant, r.PathValue("job"), q, func(l LogLine) error {
		if !after.IsZero() && !l.Time.After(after) {
			return nil // shown before the reconnect
		}
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		var ev bytes.Buffer
		ev.WriteString("id: " + l.Time.UTC().Format(time.RFC3339Nano) + "\ndata: ")
		ev.Write(b)
		ev.WriteString("\n\n")
		return send(ev.Bytes())
	})
	if err == nil || ctx.Err() != nil {
		return
	}
	msg := "The logs could not be read just now."
	var p *Problem
	switch {
	case errors.Is(err, ErrNotFound):
		msg = "There is no such job."
	case errors.As(err, &p):
		msg = problemText(p)
	default:
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			return // the browser stopped reading
		}
		h.log.Warn("console: reading a job's logs", "tenant", c.tenant, "job", r.PathValue("job"), "error", err)
	}
	_ = send([]byte("event: problem\ndata: " + oneLine(msg) + "\n\n"))
}

// oneLine keeps an event's data on one line.
func oneLine(s string) string {
	return string(bytes.ReplaceAll(bytes.ReplaceAll([]byte(s), []byte("\r"), nil), []byte("\n"), []byte(" ")))
}
