package inputs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// folderOf says which folder holds files of a kind, for hints on misplaced files.
var folderOf = map[string]string{
	v1alpha1.KindNodeType:            NodeTypesDir + "/",
	v1alpha1.KindModelMaster:         MastersDir + "/",
	v1alpha1.KindTenant:              "<tenant>/" + TenantFile,
	v1alpha1.KindManagedInferenceJob: "<tenant>/" + JobsDir + "/",
}

// decode reads one object of kind want from data into obj, strictly. dir is the folder the
// file is in (for hints). It reports problems and returns false when obj is not usable.
func (l *loader) decode(p string, data []byte, dir, want string, obj any) bool {
	docs, err := splitDocuments(data)
	if err != nil {
		l.add(p, nil, "valid YAML", "malformed YAML: %s", yamlMessage(err))
		return false
	}
	switch len(docs) {
	case 0:
		l.add(p, nil, "one "+want+" object", "file is empty")
		return false
	case 1:
	default:
		l.add(p, nil, "one object per file", "file holds %d YAML documents", len(docs))
		return false
	}
	js := docs[0]
	if len(js) == 0 || js[0] != '{' {
		l.add(p, nil, "a YAML mapping with apiVersion, kind, metadata and spec", "the document is not a mapping")
		return false
	}

	var tm struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		l.add(p, nil, "a YAML mapping", "cannot read: %v", err)
		return false
	}
	ok := true
	if s, _ := tm.APIVersion.(string); s != v1alpha1.APIVersion {
		l.add(p, field.NewPath("apiVersion"), v1alpha1.APIVersion, "is %s", describe(tm.APIVersion))
		ok = false
	}
	if s, _ := tm.Kind.(string); s != want {
		switch {
		case (dir == NodeTypesDir || dir == MastersDir) && (s == v1alpha1.KindTenant || s == v1alpha1.KindManagedInferenceJob):
			l.add(p, field.NewPath("kind"), want+" (a tenant cannot be named "+dir+": the name is reserved)",
				"is %s, but %s/ holds %s files", describe(tm.Kind), dir, want)
		case folderOf[s] != "":
			l.add(p, field.NewPath("kind"), want, "is %s, which belongs in %s, not in %s/", describe(tm.Kind), folderOf[s], dir)
		default:
			l.add(p, field.NewPath("kind"), want, "is %s", describe(tm.Kind))
		}
		ok = false
	}
	if !ok {
		return false
	}

	strictErrs, err := sjson.UnmarshalStrict(js, obj, sjson.DisallowDuplicateFields, sjson.DisallowUnknownFields)
	if err != nil {
		at, msg, expected := typeError(err, reflect.TypeOf(obj).Elem())
		l.add(p, pathOf(at), expected, "%s", msg)
		return false
	}
	for _, se := range strictErrs {
		at, msg, expected := strictError(se, reflect.TypeOf(obj).Elem())
		l.add(p, pathOf(at), expected, "%s", msg)
	}
	return len(strictErrs) == 0
}

// pathOf is the field path of a JSON path as the decoder's errors name fields
// ("spec.env[0].name"); nil for "".
func pathOf(dotted string) *field.Path {
	var p *field.Path
	for _, seg := range strings.Split(dotted, ".") {
		if dotted == "" {
			break
		}
		name, rest, _ := strings.Cut(seg, "[")
		if p == nil {
			p = field.NewPath(name)
		} else {
			p = p.Child(name)
		}
		for rest != "" {
			idx, r, _ := strings.Cut(rest, "]")
			if n, err := strconv.Atoi(idx); err == nil {
				p = p.Index(n)
			} else {
				p = p.Key(idx)
			}
			rest = strings.TrimPrefix(r, "[")
		}
	}
	return p
}

// splitDocuments splits a YAML stream and converts each non-empty document to JSON, rejecting
// duplicate keys.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, err
		}
		js = bytes.TrimSpace(js)
		if len(js) == 0 || string(js) == "null" {
			continue
		}
		out = append(out, js)
	}
}

// yamlMessage trims the wrapping of YAML parser errors to what the operator needs.
func yamlMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.ReplaceAll(msg, "yaml: unmarshal errors:\n  ", "")
	msg = strings.TrimPrefix(msg, "yaml: ")
	return strings.Join(strings.Fields(msg), " ")
}

func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "missing"
	case string:
		if v == "" {
			return "empty"
		}
		return fmt.Sprintf("%q", v)
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// typeErrorRE matches encoding/json's (and sigs.k8s.io/json's) type mismatch message, whose
// type is internal to sigs.k8s.io/json and so cannot be matched with errors.As.
var typeErrorRE = regexp.MustCompile(`^json: cannot unmarshal (.+) into Go struct field [A-Za-z0-9_]+\.(\S+) of type (.+)$`)

func typeError(err error, root reflect.Type) (field, msg, expected string) {
	m := typeErrorRE.FindStringSubmatch(err.Error())
	if m == nil {
		return "", err.Error(), "an object of the documented shape"
	}
	field = m[2]
	if t := typeAt(root, field); t != nil {
		return field, "is a " + m[1], typeWords(t)
	}
	return field, "is a " + m[1], "a value of Go type " + m[3]
}

// typeAt is the Go type of the field at a JSON path like spec.env[0].name.
func typeAt(t reflect.Type, fieldPath string) reflect.Type {
	for _, seg := range strings.Split(fieldPath, ".") {
		idx := strings.IndexByte(seg, '[')
		if idx >= 0 {
			seg = seg[:idx]
		}
		t = fieldType(t, seg)
		if t == nil {
			return nil
		}
		if idx >= 0 {
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() != reflect.Slice {
				return nil
			}
			t = t.Elem()
		}
	}
	return t
}

// typeWords says in words what JSON a Go type takes.
func typeWords(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list of " + plural(typeWords(t.Elem()))
	case reflect.Map:
		return "a mapping of names to " + plural(typeWords(t.Elem()))
	default:
		return "a mapping (object)"
	}
}

func plural(words string) string {
	switch words {
	case "a string":
		return "strings"
	case "a whole number":
		return "whole numbers"
	case "true or false":
		return "true or false"
	default:
		return "mappings"
	}
}

var unknownFieldRE = regexp.MustCompile(`^unknown field "(.+)"$`)
var duplicateFieldRE = regexp.MustCompile(`^duplicate field "(.+)"$`)

func strictError(err error, root reflect.Type) (field, msg, expected string) {
	s := err.Error()
	if m := unknownFieldRE.FindStringSubmatch(s); m != nil {
		field = m[1]
		if strings.Count(field, ".") == 1 && strings.HasPrefix(field, "metadata.") {
			return field, "unknown field", "one of: " + strings.Join(metadataFields, ", ")
		}
		known := knownFields(root, field)
		if len(known) == 0 {
			return field, "unknown field", "no field of this name"
		}
		return field, "unknown field", "one of: " + strings.Join(known, ", ")
	}
	if m := duplicateFieldRE.FindStringSubmatch(s); m != nil {
		return m[1], "set twice", "each field once"
	}
	return "", s, "an object of the documented shape"
}

// knownFields lists the JSON fields of the object that holds the (unknown) field at path.
func knownFields(t reflect.Type, fieldPath string) []string {
	segs := strings.Split(fieldPath, ".")
	for _, seg := range segs[:len(segs)-1] {
		if i := strings.IndexByte(seg, '['); i >= 0 {
			seg = seg[:i]
		}
		t = fieldType(t, seg)
		if t == nil {
			return nil
		}
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	collectFields(t, &names)
	slices.Sort(names)
	return slices.Compact(names)
}

func fieldType(t reflect.Type, name string) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" && f.Anonymous {
			if ft := fieldType(f.Type, name); ft != nil {
				return ft
			}
			continue
		}
		if tag == name {
			return f.Type
		}
	}
	return nil
}

func collectFields(t reflect.Type, names *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" && f.Anonymous {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, names)
			}
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		*names = append(*names, tag)
	}
}
