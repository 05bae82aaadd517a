package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// The recipes are decoded from yaml.v3 nodes by a small reflective walker instead of
// yaml.Unmarshal, for two reasons: every error names the dotted field path and line (yaml's
// own errors give a line and a Go type, not the field), and mapping order survives (features,
// variants and env are emitted in the order the recipe writes them, as upstream does).
//
// Struct fields are matched by their `yaml:"name"` tag; keys a struct does not declare are
// ignored, so keys upstream adds later do not break loading. A `recipe:"required"` tag makes a
// field mandatory.

// nodeDecoder is implemented by types whose YAML shape is not a plain struct, list or map
// (a number or a hardware-keyed map, a string or a brand map, an ordered mapping).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path *field.Path) error
}

// maxNodeVisits bounds the work one file can cause: aliases can make a small file expand
// exponentially ("billion laughs"); no real recipe comes near this.
const maxNodeVisits = 1 << 20

type decoder struct {
	visits int
}

// parseDocument parses data as exactly one YAML document and returns its root node (nil for
// an empty file).
func parseDocument(data []byte) (*yaml.Node, error) {
	if !mayHoldDocuments(data) {
		// One document at most: yaml.Unmarshal parses the bytes in place, where a Decoder
		// copies them through a reader (docs/recipes.md, "Speed").
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("malformed YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("malformed YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("malformed YAML: expected one document, found a second one at line %d", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("malformed YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// mayHoldDocuments reports whether data has a document marker ("---" or "...") at the start of
// a line past its first line, which only a stream of several documents needs.
func mayHoldDocuments(data []byte) bool {
	for _, marker := range []string{"\n---", "\n..."} {
		if bytes.Contains(data, []byte(marker)) {
			return true
		}
	}
	return false
}

// decodeInto decodes root into out (a pointer to a struct).
func decodeInto(root *yaml.Node, out any) error {
	d := &decoder{}
	if root == nil {
		root = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	return d.decode(root, reflect.ValueOf(out).Elem(), nil)
}

var (
	nodeDecoderType = reflect.TypeFor[nodeDecoder]()
)

// join is the path of key under path (nil: the top of the file).
func join(path *field.Path, key string) *field.Path {
	if path == nil {
		return field.NewPath(key)
	}
	return path.Child(key)
}

// index is the path of item i of the list at path.
func index(path *field.Path, i int) *field.Path {
	if path == nil {
		return field.NewPath("").Index(i)
	}
	return path.Index(i)
}

// errorf is a decoding problem at path (nil: the file as a whole), at n's line.
func (d *decoder) errorf(n *yaml.Node, path *field.Path, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return problem.Problem{Line: line, Err: fielderr.Errorf(path, format, args...)}
}

// resolve follows aliases and counts the work done.
func (d *decoder) resolve(n *yaml.Node, path *field.Path) (*yaml.Node, error) {
	for hops := 0; n.Kind == yaml.AliasNode; hops++ {
		if n.Alias == nil || hops > 64 {
			return nil, d.errorf(n, path, "unresolvable alias")
		}
		n = n.Alias
	}
	d.visits++
	if d.visits > maxNodeVisits {
		return nil, d.errorf(n, path, "document too large after expanding aliases")
	}
	return n, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe says what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return fmt.Sprintf("string %q", v)
		case "!!int", "!!float":
			return "number " + v
		case "!!bool":
			return "boolean " + v
		default:
			return fmt.Sprintf("%s %q", strings.TrimPrefix(n.ShortTag(), "!!"), v)
		}
	}
	return "an unknown node"
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path *field.Path) error {
	n, err := d.resolve(n, path)
	if err != nil {
		return err
	}
	if v.CanAddr() && v.Addr().Type().Implements(nodeDecoderType) {
		return v.Addr().Interface().(nodeDecoder).decodeNode(d, n, path)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if err := d.decode(n, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.String, reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64, reflect.Bool:
		return d.decodeScalar(n, v, path)
	case reflect.Slice:
		if isNull(n) {
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, path, "expected a list, got %s", describe(n))
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			if err := d.decode(c, s.Index(i), index(path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		return d.decodeMap(n, v, path)
	case reflect.Struct:
		return d.decodeStruct(n, v, path)
	}
	return fmt.Errorf("recipe decoder: type %s is not supported", v.Type())
}

// decodeScalar decodes a string, a whole number, a number or a boolean; null leaves numbers
// and booleans at zero.
func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path *field.Path) error {
	if v.Kind() == reflect.String {
		s, err := d.scalarString(n, path)
		if err != nil {
			return err
		}
		v.SetString(s)
		return nil
	}
	if isNull(n) {
		return nil
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		i, err := d.integer(n, path)
		if err != nil {
			return err
		}
		if v.OverflowInt(i) {
			return d.errorf(n, path, "number %s is out of range", n.Value)
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := d.number(n, path)
		if err != nil {
			return err
		}
		v.SetFloat(f)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return d.errorf(n, path, "expected true or false, got %s", describe(n))
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			return d.errorf(n, path, "expected true or false, got %s", describe(n))
		}
		v.SetBool(b)
	}
	return nil
}

// decodeMap decodes a mapping into a map with string keys.
func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path *field.Path) error {
	if isNull(n) {
		return nil
	}
	if v.Type().Key().Kind() != reflect.String {
		return fmt.Errorf("recipe decoder: map key type %s is not supported", v.Type().Key())
	}
	m := reflect.MakeMap(v.Type())
	err := d.eachPair(n, path, func(key string, kn, vn *yaml.Node) error {
		ev := reflect.New(v.Type().Elem()).Elem()
		if err := d.decode(vn, ev, join(path, key)); err != nil {
			return err
		}
		m.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), ev)
		return nil
	})
	if err != nil {
		return err
	}
	v.Set(m)
	return nil
}

// eachPair walks a mapping's key/value pairs in order. Keys must be scalars and unique.
func (d *decoder) eachPair(n *yaml.Node, path *field.Path, fn func(key string, kn, vn *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return d.errorf(n, path, "expected a mapping, got %s", describe(n))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, err := d.resolve(n.Content[i], path)
		if err != nil {
			return err
		}
		if kn.Kind != yaml.ScalarNode {
			return d.errorf(kn, path, "expected a plain key, got %s", describe(kn))
		}
		key := kn.Value
		if key == "<<" && kn.ShortTag() == "!!merge" {
			return d.errorf(kn, path, "YAML merge keys (<<) are not supported")
		}
		if seen[key] {
			return d.errorf(kn, join(path, key), "duplicate key")
		}
		seen[key] = true
		if err := fn(key, kn, n.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

type structField struct {
	index    int
	required bool
}

// structInfo is what decoding needs of a struct type: its fields by YAML key, and the keys of
// the required ones in declaration order (so that messages are stable).
type structInfo struct {
	fields   map[string]structField
	required []string
}

// infoByType memoises structInfoOf: a load decodes thousands of structs of a dozen types.
var infoByType sync.Map // reflect.Type -> *structInfo

func structInfoOf(t reflect.Type) *structInfo {
	if info, ok := infoByType.Load(t); ok {
		return info.(*structInfo)
	}
	info := &structInfo{fields: make(map[string]structField, t.NumField())}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		required := f.Tag.Get("recipe") == "required"
		info.fields[name] = structField{index: i, required: required}
		if required {
			info.required = append(info.required, name)
		}
	}
	infoByType.Store(t, info)
	return info
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path *field.Path) error {
	info := structInfoOf(v.Type())
	if isNull(n) {
		n = &yaml.Node{Kind: yaml.MappingNode, Line: n.Line}
	}
	var found map[string]bool
	if len(info.required) > 0 {
		found = make(map[string]bool, len(info.required))
	}
	err := d.eachPair(n, path, func(key string, kn, vn *yaml.Node) error {
		f, ok := info.fields[key]
		if !ok {
			return nil // a key upstream added that we do not use
		}
		at := join(path, key)
		rv, err := d.resolve(vn, at)
		if err != nil {
			return err
		}
		if f.required {
			found[key] = true
			if isNull(rv) {
				return d.errorf(kn, at, "is required but empty")
			}
		}
		return d.decode(rv, v.Field(f.index), at)
	})
	if err != nil {
		return err
	}
	for _, name := range info.required {
		if !found[name] {
			return d.errorf(n, join(path, name), "is required but missing")
		}
	}
	return nil
}

// scalarString accepts any scalar (a version like 0.12 or a date is read as written) and
// null as the empty string.
func (d *decoder) scalarString(n *yaml.Node, path *field.Path) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", d.errorf(n, path, "expected a string, got %s", describe(n))
	}
	if isNull(n) {
		return "", nil
	}
	return n.Value, nil
}

func (d *decoder) integer(n *yaml.Node, path *field.Path) (int64, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!int":
			if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
				return i, nil
			}
		case "!!float":
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				return int64(f), nil
			}
		}
	}
	return 0, d.errorf(n, path, "expected a whole number, got %s", describe(n))
}

func (d *decoder) number(n *yaml.Node, path *field.Path) (float64, error) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!int":
			if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
				return float64(i), nil
			}
		case "!!float":
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f, nil
			}
		}
	}
	return 0, d.errorf(n, path, "expected a number, got %s", describe(n))
}

// Ordered is a YAML mapping that keeps the order its keys are written in.
type Ordered[T any] struct {
	Keys   []string
	Values map[string]T
}

// Get returns the value of key.
func (o Ordered[T]) Get(key string) (T, bool) {
	v, ok := o.Values[key]
	return v, ok
}

// Len is the number of keys.
func (o Ordered[T]) Len() int { return len(o.Keys) }

func (o *Ordered[T]) decodeNode(d *decoder, n *yaml.Node, path *field.Path) error {
	o.Keys, o.Values = nil, nil
	if isNull(n) {
		return nil
	}
	values := make(map[string]T)
	var keys []string
	err := d.eachPair(n, path, func(key string, kn, vn *yaml.Node) error {
		var v T
		if err := d.decode(vn, reflect.ValueOf(&v).Elem(), join(path, key)); err != nil {
			return err
		}
		keys = append(keys, key)
		values[key] = v
		return nil
	})
	if err != nil {
		return err
	}
	o.Keys, o.Values = keys, values
	return nil
}
