// Package redact removes secrets from the lines a model server prints before they leave the VM:
// the values the agent knows are secret (the Hugging Face token, the master's secret env), and
// anything shaped like a credential (Hugging Face tokens, inferplane API keys, bearer tokens,
// key=value pairs whose key names a secret, passwords in URLs). It is the one place the agent
// redacts, so every line, status detail and last-lines list passes through it.
package redact

import (
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a secret.
const Mask = "[REDACTED]"

// MinSecret is the shortest value redacted as a literal: a shorter "secret" (a one-letter
// value, an empty file) would mask ordinary text everywhere it occurs, and is no credential.
const MinSecret = 8

// Redactor replaces secrets in text. The zero value redacts the shapes only.
type Redactor struct {
	literals []string // longest first, so a secret that contains another is masked whole
}

// New returns a Redactor for these literal secrets (values shorter than MinSecret and
// surrounding white space are ignored) and every credential shape.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s = strings.TrimSpace(s); len(s) >= MinSecret && !slices.Contains(r.literals, s) {
			r.literals = append(r.literals, s)
		}
	}
	slices.SortFunc(r.literals, func(a, b string) int { return len(b) - len(a) })
	return r
}

// Secrets is how many literal secrets the Redactor masks.
func (r *Redactor) Secrets() int { return len(r.literals) }

// shape is a credential pattern: keep holds the submatch index whose text stays in front of
// the mask (0: mask the whole match).
type shape struct {
	re   *regexp.Regexp
	keep int
	// hint: a match is only possible where the lowercased text contains one of these.
	hints []string
}

var shapes = []shape{
	// Hugging Face user access tokens: "hf_" and 34 letters and digits (older ones were
	// shorter; 20 is well above any word that starts with hf_).
	{re: regexp.MustCompile(`\bhf_[A-Za-z0-9]{20,}`), hints: []string{"hf_"}},
	// inferplane API keys: "ipk_" and unpadded URL-safe base64 (auth/keys).
	{re: regexp.MustCompile(`\bipk_[A-Za-z0-9_-]{20,}`), hints: []string{"ipk_"}},
	// A bearer token in a header or a log of one.
	{re: regexp.MustCompile(`(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{8,})`), keep: 1, hints: []string{"bearer"}},
	// key=value, key: value, "key": "value" where the key names a secret.
	{re: regexp.MustCompile(`(?i)((?:\b|_)(?:api[_-]?key|access[_-]?token|auth[_-]?token|hf[_-]?token|token|password|passwd|secret|secret[_-]?key|client[_-]?secret)["']?\s*[:=]\s*)("[^"]{8,}"|'[^']{8,}'|[^\s"',;}\[\]]{8,})`),
		keep: 1, hints: []string{"key", "token", "pass", "secret"}},
	// An Authorization header of another scheme (Basic, token).
	{re: regexp.MustCompile(`(?i)(authorization["']?\s*[:=]\s*["']?(?:basic|token)\s+)([^\s"']{8,})`), keep: 1, hints: []string{"authorization"}},
	// --api-key VALUE, --hf-token VALUE on a command line.
	{re: regexp.MustCompile(`(?i)(--(?:api-key|hf-token|token|password)[ =]+)(\S{8,})`), keep: 1, hints: []string{"--"}},
	// A password in a URL: scheme://user:password@host.
	{re: regexp.MustCompile(`(://[^/\s:@]+:)([^@\s/]+)(@)`), keep: 1, hints: []string{"://"}},
}

// String returns s with every secret masked.
func (r *Redactor) String(s string) string {
	for _, lit := range r.literals {
		if strings.Contains(s, lit) {
			s = strings.ReplaceAll(s, lit, Mask)
		}
	}
	var lower string
	for _, sh := range shapes {
		if lower == "" {
			lower = strings.ToLower(s)
		}
		if !containsAny(lower, sh.hints) {
			continue
		}
		s = mask(sh, s)
		lower = ""
	}
	return s
}

// Strings masks every element of ss in place and returns it.
func (r *Redactor) Strings(ss []string) []string {
	for i, s := range ss {
		ss[i] = r.String(s)
	}
	return ss
}

func mask(sh shape, s string) string {
	if sh.keep == 0 {
		return sh.re.ReplaceAllLiteralString(s, Mask)
	}
	return sh.re.ReplaceAllStringFunc(s, func(m string) string {
		sub := sh.re.FindStringSubmatch(m)
		tail := ""
		if len(sub) > 3 { // the URL shape keeps what follows the password
			tail = sub[3]
		}
		if v := sub[sh.keep+1]; v[0] == '"' || v[0] == '\'' { // a quoted value keeps its quotes
			return sub[sh.keep] + v[:1] + Mask + v[:1] + tail
		}
		return sub[sh.keep] + Mask + tail
	})
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
