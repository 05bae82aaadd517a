package serve_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inferplane/inferplane/internal/serve"
)

func TestHealthAnswersFromNamedChecksAndDrains(t *testing.T) {
	keys := func(note string, err error) serve.Checker { return func() (string, error) { return note, err } }
	for _, c := range []struct {
		name   string
		checks map[string]serve.Checker // one or two, added in name order
		drain  bool
		path   string
		code   int
		body   string
	}{
		{"alive whatever the checks", map[string]serve.Checker{"keys": keys("", errors.New("not loaded"))}, false, "/healthz", 200, "ok\n"},
		{"alive while draining", nil, true, "/healthz", 200, "ok\n"},
		{"no checks", nil, false, "/readyz", 200, "ok\n"},
		{"a note", map[string]serve.Checker{"keys": keys("3 keys", nil)}, false, "/readyz", 200, "ok: 3 keys\n"},
		{"notes joined", map[string]serve.Checker{"a": keys("one", nil), "b": keys("two", nil)}, false, "/readyz", 200, "ok: one; two\n"},
		{"not ready says why", map[string]serve.Checker{"a": keys("one", nil), "b": keys("", errors.New("not fetched yet"))}, false,
			"/readyz", 503, "not ready: not fetched yet\n"},
		{"draining wins", map[string]serve.Checker{"keys": keys("3 keys", nil)}, true, "/readyz", 503, "shutting down\n"},
		{"verbose names each check", map[string]serve.Checker{"a": keys("", nil), "b": keys("", errors.New("down"))}, false,
			"/readyz?verbose", 503, "[+]a ok\n[-]b: down\nnot ready: down\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h serve.Health
			for _, name := range []string{"a", "b", "keys"} {
				if chk, ok := c.checks[name]; ok {
					h.AddReadyzCheck(name, chk)
				}
			}
			if c.drain {
				h.Drain()
			}
			mux := http.NewServeMux()
			h.Register(mux)
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
			assert.Equal(t, c.code, rec.Code)
			assert.Equal(t, c.body, rec.Body.String())
			assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
			assert.Equal(t, c.drain, h.Draining())
		})
	}
}
