package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// OpenAPI checks answers against an OpenAPI 3.1 document (the one the server serves): each
// answer's body must be valid against the schema its operation declares for its status (else
// the default response) and content type, with santhosh-tekuri/jsonschema (JSON Schema 2020-12,
// which OpenAPI 3.1's schemas are).
type OpenAPI struct {
	c     *jsonschema.Compiler
	paths []pathRe
	doc   map[string]any

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
	// Checked counts the answers checked, by "METHOD path-template status".
	Checked map[string]int
}

type pathRe struct {
	template string
	re       *regexp.Regexp
}

// NewOpenAPI loads a document.
func NewOpenAPI(doc []byte) (*OpenAPI, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("mem://openapi.json", v); err != nil {
		return nil, err
	}
	o := &OpenAPI{c: c, doc: v.(map[string]any), schemas: map[string]*jsonschema.Schema{}, Checked: map[string]int{}}
	paths, _ := o.doc["paths"].(map[string]any)
	param := regexp.MustCompile(`\\\{[^}]+\\\}`) // a {name} after QuoteMeta
	for p := range paths {
		o.paths = append(o.paths, pathRe{template: p, re: regexp.MustCompile("^" + param.ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$")})
	}
	return o, nil
}

func pointer(parts ...string) string {
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1")
	}
	return "/" + strings.Join(parts, "/")
}

// Check validates one answer; it returns why it is not valid (nil when it is). An NDJSON
// answer (application/x-ndjson) is checked one line at a time: body is then one line.
func (o *OpenAPI) Check(req *http.Request, resp *http.Response, body []byte) error {
	tmpl := ""
	for _, p := range o.paths {
		if p.re.MatchString(req.URL.Path) {
			tmpl = p.template
		}
	}
	if tmpl == "" {
		return fmt.Errorf("%s %s: no such path in the OpenAPI document", req.Method, req.URL.Path)
	}
	method := strings.ToLower(req.Method)
	op, _ := o.doc["paths"].(map[string]any)[tmpl].(map[string]any)[method].(map[string]any)
	if op == nil {
		return fmt.Errorf("%s %s: the document has no %s operation", req.Method, tmpl, method)
	}
	responses, _ := op["responses"].(map[string]any)
	status := strconv.Itoa(resp.StatusCode)
	if _, ok := responses[status]; !ok {
		if _, ok := responses["default"]; !ok {
			return fmt.Errorf("%s %s: status %s is not declared (nor a default)", req.Method, tmpl, status)
		}
		status = "default"
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	r, _ := responses[status].(map[string]any)
	content, _ := r["content"].(map[string]any)
	if len(body) == 0 && len(content) == 0 {
		return o.count(req.Method, tmpl, resp.StatusCode)
	}
	if _, ok := content[ct]; !ok {
		return fmt.Errorf("%s %s %d: content type %q is not declared (declared: %v)", req.Method, tmpl, resp.StatusCode, ct, keys(content))
	}
	loc := "mem://openapi.json#" + pointer("paths", tmpl, method, "responses", status, "content", ct, "schema")
	o.mu.Lock()
	sch, ok := o.schemas[loc]
	if !ok {
		var err error
		if sch, err = o.c.Compile(loc); err != nil {
			o.mu.Unlock()
			return fmt.Errorf("compile %s: %w", loc, err)
		}
		o.schemas[loc] = sch
	}
	o.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s %d: the body is not JSON: %w", req.Method, tmpl, resp.StatusCode, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s %s %d: the body does not match the OpenAPI document: %v\nbody: %s", req.Method, tmpl, resp.StatusCode, err, body)
	}
	return o.count(req.Method, tmpl, resp.StatusCode)
}

func (o *OpenAPI) count(method, tmpl string, status int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Checked[method+" "+tmpl+" "+strconv.Itoa(status)]++
	return nil
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Inspector is a client.Inspect that fails the test on an answer the document does not allow.
func (o *OpenAPI) Inspector(t testing.TB) func(*http.Request, *http.Response, []byte) {
	return func(req *http.Request, resp *http.Response, body []byte) {
		if err := o.Check(req, resp, body); err != nil {
			t.Errorf("OpenAPI: %v", err)
		}
	}
}

// Fetch reads the document a server serves.
func Fetch(t testing.TB, baseURL string) []byte {
	t.Helper()
	resp, err := http.Get(baseURL + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/v1/openapi.json: %s: %s", resp.Status, buf.String())
	}
	var probe map[string]any
	if err := json.Unmarshal(buf.Bytes(), &probe); err != nil || probe["openapi"] != "3.1.0" {
		t.Fatalf("/api/v1/openapi.json is not an OpenAPI 3.1 document: %v %v", err, probe["openapi"])
	}
	return buf.Bytes()
}
