package productapi

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// What a browser may do with the API. The API signs callers in by the bearer token alone
// (authenticate reads no cookie), which a browser never sends by itself, and answers no CORS
// preflight: a page of another site can neither send a signed-in request nor read an answer.
// Two more things hold it there whatever a later change adds:
//   - every answer says it must not be framed, sniffed into a page or read across sites
//     (securityHeaders);
//   - a body is JSON, declared as such (jsonBodies): a form or a text/plain post, or a body
//     with no type, which a page of another site can send without asking first, is refused
//     before anything reads it.

// APICSP is the Content-Security-Policy of the API's answers: they are data, never a page, so
// nothing may load from them and no page may frame them.
const APICSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// securityHeaders sets the browser headers of every answer of the API (the console sets its
// own on its pages).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", APICSP)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// jsonBodies refuses a request whose body is not declared JSON (415), before it is signed in
// or read: application/json, or a type ending in +json.
func (s *Server) jsonBodies(ctx huma.Context, next func(huma.Context)) {
	r, _ := humago.Unwrap(ctx)
	if r == nil || r.ContentLength == 0 || r.Method == http.MethodGet || r.Method == http.MethodHead {
		next(ctx)
		return
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		next(ctx)
		return
	}
	s.metrics.refusals.WithLabelValues("415", "content-type").Inc()
	_ = huma.WriteErr(s.api, ctx, http.StatusUnsupportedMediaType,
		fmt.Sprintf("the body must be JSON, sent with Content-Type: application/json (got %q)", ct))
}
