package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/usage"
)

var camelCase = regexp.MustCompile(`^[a-z][a-zA-Z0-9]*$`)

// JSON is camelCase in every command's -o json (docs/cli.md): what the commands print without
// a cluster or gateway is printed and read back; what jobs detail shows of a cluster and
// health and keys usage print (from a running gateway) is checked on its Go types.
func TestJSONIsCamelCase(t *testing.T) {
	tenants := newJobsTree(t).tenants
	store, secret := filepath.Join(t.TempDir(), "keys.db"), writeKeySecret(t)
	for _, args := range [][]string{
		{"version", "-o", "json"},
		{"recipe", "show", "Qwen/Qwen3-32B", "--recipes", "../../recipes", "-o", "json"},
		{"jobs", "detail", "acme/qwen3-32b", "--tenants", tenants, "--recipes", "../../recipes", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "-o", "json"},
		{"keys", "create", "--tenant", "acme", "--tenants", tenants, "--store-file", store, "--secret-file", secret, "--requests-per-minute", "5", "-o", "json"},
		{"keys", "list", "--store-file", store, "-o", "json"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			out, errOut, _ := execCLI(context.Background(), args...) // jobs detail exits 1: no cluster
			var v any
			require.NoError(t, json.Unmarshal([]byte(out), &v), "%s\n%s", out, errOut)
			for _, k := range jsonKeys(v, "") {
				assert.Regexp(t, camelCase, k[strings.LastIndex(k, "/")+1:], "%s: %s", strings.Join(args, " "), k)
			}
		})
	}
	for _, v := range []any{jobDetail{}, usage.HealthReport{}, usage.UsageReport{}, limits.StatusReport{}} {
		for _, name := range jsonFieldNames(reflect.TypeOf(v), map[reflect.Type]bool{}) {
			assert.Regexp(t, camelCase, name, "%T", v)
		}
	}
}

// jsonKeys are the object keys of a decoded JSON value, as paths.
func jsonKeys(v any, path string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			out = append(out, path+"/"+k)
			out = append(out, jsonKeys(x, path+"/"+k)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, jsonKeys(x, path+"/*")...)
		}
	}
	return out
}

// jsonFieldNames are the JSON names of a type's fields, its nested types' included.
func jsonFieldNames(t reflect.Type, seen map[reflect.Type]bool) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] || t.PkgPath() == "time" {
		return nil
	}
	seen[t] = true
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || tag == "-":
			continue
		case tag == "" && f.Anonymous:
		case tag == "":
			out = append(out, f.Name)
		default:
			out = append(out, tag)
		}
		out = append(out, jsonFieldNames(f.Type, seen)...)
	}
	return out
}
