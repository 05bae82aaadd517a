package fastyaml

import (
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The direct path writes Go values the way encoding/json sees them (field names and options
// from json tags, embedded structs promoted with encoding/json's rules, json.Marshaler called
// where encoding/json calls it), without JSON text in between. Whatever it does not handle
// (floats, []byte, the ",string" option, map keys that are not strings, TextMarshaler values,
// a MarshalJSON that fails) makes it decline, and Marshal takes the JSON path for that
// document.

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	isZeroerType      = reflect.TypeFor[interface{ IsZero() bool }]()
)

// typeInfo is what the direct path needs to know of a type, worked out once.
type typeInfo struct {
	typ          reflect.Type
	marshaler    bool // the type implements json.Marshaler
	ptrMarshaler bool // *T does (used when the value is addressable)
	text         bool // T or *T implements encoding.TextMarshaler (left to the JSON path)
	fields       []field
	fieldsOK     bool
	// stringMap: a map of strings to plain strings, written without reflection per entry.
	stringMap bool
	// zeroer and ptrZeroer: T, or *T, has an IsZero method (omitzero uses it).
	zeroer, ptrZeroer bool
	// elem is the element type's info (pointers, slices, arrays, maps), looked up once.
	elem atomic.Pointer[typeInfo]
}

// elemInfo is the info of the element type of a pointer, slice, array or map type.
func (i *typeInfo) elemInfo() *typeInfo {
	if e := i.elem.Load(); e != nil {
		return e
	}
	e := infoFor(i.typ.Elem())
	i.elem.Store(e)
	return e
}

var infos sync.Map // reflect.Type -> *typeInfo

func infoFor(t reflect.Type) *typeInfo {
	if i, ok := infos.Load(t); ok {
		return i.(*typeInfo)
	}
	i := &typeInfo{typ: t, marshaler: t.Implements(marshalerType), zeroer: t.Implements(isZeroerType)}
	if t.Kind() != reflect.Interface {
		i.ptrZeroer = reflect.PointerTo(t).Implements(isZeroerType)
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		i.ptrMarshaler = reflect.PointerTo(t).Implements(marshalerType)
		i.text = t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)
	} else {
		i.text = t.Implements(textMarshalerType)
	}
	switch t.Kind() {
	case reflect.Struct:
		i.fields = planFields(t)
		i.fieldsOK = i.fields != nil
	case reflect.Map:
		// Not infoFor(t.Elem()): a map type may contain itself.
		e := t.Elem()
		i.stringMap = t.ConvertibleTo(stringMapType) && !e.Implements(marshalerType) && !e.Implements(textMarshalerType) &&
			!reflect.PointerTo(e).Implements(marshalerType) && !reflect.PointerTo(e).Implements(textMarshalerType)
	}
	actual, _ := infos.LoadOrStore(t, i)
	return actual.(*typeInfo)
}

// remitter writes YAML straight from Go values, with the emitter's layout and scalar rules.
type remitter struct {
	emitter
	// p parses MarshalJSON output (into its arena) for the node emitter.
	p *parser
	// keep holds MarshalJSON results whose bytes parsed strings point into.
	keep [][]byte
	// pairs is scratch space for sorting map entries, shared by nested maps as a stack.
	pairs *[]mapPair
	// info is the type info of the last struct, map or list resolve returned, and addr its
	// addressability to encoding/json.
	info *typeInfo
	addr bool
	// depth is how many containers deep the walk is: a cyclic value declines (encoding/json
	// reports the cycle on the JSON path) instead of recursing forever.
	depth int
}

const maxDepth = 256

type mapPair struct {
	key   string
	val   reflect.Value
	ascii bool // key is ASCII
}

// sortPairs puts map entries in go-yaml's key order (insertion sort: maps here are small).
func sortPairs(pairs []mapPair) {
	for i := 1; i < len(pairs); i++ {
		for j := i; j > 0 && keyLessASCII(pairs[j].key, pairs[j-1].key, pairs[j].ascii, pairs[j-1].ascii); j-- {
			pairs[j], pairs[j-1] = pairs[j-1], pairs[j]
		}
	}
}

// value classes of resolve
const (
	classNode   = iota // a scalar, or a container parsed from MarshalJSON: see the node
	classStruct        // write the struct's fields
	classMap           // write the map's entries, sorted
	classList          // write the slice or array
)

// resolve dereferences v and says how to write it. info is v's type info when the caller
// knows it (nil: look it up). addr says whether encoding/json would see v as addressable
// (reached through a pointer or a slice, not through a map or an interface): only then does
// it call a MarshalJSON with a pointer receiver. v itself may be addressable regardless (map
// values are read into fresh variables); r.addr is the answer for the returned value.
func (r *remitter) resolve(v reflect.Value, info *typeInfo, addr bool) (reflect.Value, node, int, bool) {
	r.addr = addr
	for {
		if !v.IsValid() {
			return v, node{kind: 'z', s: "null"}, classNode, true
		}
		t := v.Type()
		if info == nil {
			info = infoFor(t)
		}
		if t.Kind() != reflect.Pointer || !v.IsNil() {
			if info.marshaler {
				n, ok := r.marshaler(v)
				return v, n, classNode, ok
			}
			if info.ptrMarshaler && addr && v.CanAddr() {
				n, ok := r.marshaler(v.Addr())
				return v, n, classNode, ok
			}
			if info.text && t.Kind() != reflect.Interface {
				return v, node{}, 0, false // rare in manifests; the JSON path knows it
			}
		}
		switch t.Kind() {
		case reflect.String:
			return v, node{kind: 's', s: v.String()}, classNode, true
		case reflect.Bool:
			if v.Bool() {
				return v, node{kind: 'b', s: "true"}, classNode, true
			}
			return v, node{kind: 'b', s: "false"}, classNode, true
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return v, node{kind: 'n', s: strconv.FormatInt(v.Int(), 10)}, classNode, true
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			return v, node{kind: 'n', s: strconv.FormatUint(v.Uint(), 10)}, classNode, true
		case reflect.Pointer, reflect.Interface:
			if v.IsNil() {
				return v, node{kind: 'z', s: "null"}, classNode, true
			}
			if t.Kind() == reflect.Pointer {
				info, addr = info.elemInfo(), true
			} else {
				info, addr = nil, false // the dynamic type, a copy
			}
			r.addr = addr
			v = v.Elem()
			continue
		case reflect.Struct:
			r.info = info
			return v, node{}, classStruct, info.fieldsOK
		case reflect.Map:
			if v.IsNil() {
				return v, node{kind: 'z', s: "null"}, classNode, true
			}
			r.info = info
			return v, node{}, classMap, t.Key().Kind() == reflect.String
		case reflect.Slice:
			if v.IsNil() {
				return v, node{kind: 'z', s: "null"}, classNode, true
			}
			r.info = info
			return v, node{}, classList, t.Elem().Kind() != reflect.Uint8 // []byte: base64
		case reflect.Array:
			r.info = info
			return v, node{}, classList, t.Elem().Kind() != reflect.Uint8
		}
		return v, node{}, 0, false // floats, complex, channels, functions
	}
}

func (r *remitter) marshaler(v reflect.Value) (node, bool) {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return node{kind: 'z', s: "null"}, true
	}
	m, ok := v.Interface().(json.Marshaler)
	if !ok {
		return node{}, false
	}
	j, err := m.MarshalJSON()
	if err != nil || !json.Valid(j) {
		return node{}, false // the JSON path reports it
	}
	r.keep = append(r.keep, j)
	r.p.data, r.p.pos = j, 0
	n, err := r.p.document()
	r.p.data = nil
	return n, err == nil
}

func (r *remitter) top(v reflect.Value) bool {
	v, n, class, ok := r.resolve(v, nil, false)
	if !ok {
		return false
	}
	info, addr := r.info, r.addr
	switch class {
	case classNode:
		return r.emitter.top(&n)
	case classList:
		if v.Len() == 0 {
			r.buf = append(r.buf, "[]\n"...)
			return true
		}
		return r.list(v, info, 0, addr)
	}
	wrote, ok := r.entries(v, info, class, 0, false, addr)
	if ok && wrote == 0 {
		r.buf = append(r.buf, "{}\n"...)
	}
	return ok
}

// entries writes the entries of a struct or map at indent and returns how many it wrote.
func (r *remitter) entries(v reflect.Value, info *typeInfo, class, indent int, inline, addr bool) (int, bool) {
	if r.depth++; r.depth > maxDepth {
		return 0, false
	}
	wrote, ok := r.entriesOf(v, info, class, indent, inline, addr)
	r.depth--
	return wrote, ok
}

func (r *remitter) entriesOf(v reflect.Value, info *typeInfo, class, indent int, inline, addr bool) (int, bool) {
	if class == classStruct {
		wrote := 0
		for i := range info.fields {
			f := &info.fields[i]
			fv, ok := fieldByIndex(v, f.index)
			if !ok || f.omitEmpty && isEmpty(fv) || f.omitZero && isZero(fv, f.typeInfo()) {
				continue // behind a nil embedded pointer, or omitted
			}
			// A field behind an embedded pointer is addressable to encoding/json.
			if !r.entry(f.name, fv, f.typeInfo(), indent, inline && wrote == 0, f.plainKey, addr || f.viaPointer) {
				return 0, false
			}
			wrote++
		}
		return wrote, true
	}
	// A map: its entries in go-yaml's key order.
	if info.stringMap {
		return r.stringMap(v.Convert(stringMapType).Interface().(map[string]string), indent, inline)
	}
	elem := info.elemInfo()
	stack := r.pairs
	mark := len(*stack)
	it := v.MapRange()
	for it.Next() {
		val := reflect.New(v.Type().Elem()).Elem()
		val.SetIterValue(it)
		k := it.Key().String()
		*stack = append(*stack, mapPair{key: k, val: val, ascii: isASCII(k)})
	}
	sortPairs((*stack)[mark:])
	defer func() { clear((*stack)[mark:]); *stack = (*stack)[:mark] }()
	for i := mark; i < len(*stack); i++ {
		pr := (*stack)[i]
		// Map values are copies: never addressable to encoding/json.
		if !r.entry(pr.key, pr.val, elem, indent, inline && i == mark, false, false) {
			return 0, false
		}
	}
	return len(*stack) - mark, true
}

var stringMapType = reflect.TypeFor[map[string]string]()

// stringMap writes a map of strings to strings (labels, annotations, selectors) without
// reflection per entry. Small maps are sorted in arrays on the stack.
func (r *remitter) stringMap(m map[string]string, indent int, inline bool) (int, bool) {
	var keyArr, valArr [16]string
	keys, vals := keyArr[:0], valArr[:0]
	if len(m) > len(keyArr) {
		keys, vals = make([]string, 0, len(m)), make([]string, 0, len(m))
	}
	ascii := true
	for k, v := range m {
		keys = append(keys, k)
		vals = append(vals, v)
		ascii = ascii && isASCII(k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0; j-- {
			if !keyLessASCII(keys[j], keys[j-1], ascii, ascii) {
				break
			}
			keys[j], keys[j-1] = keys[j-1], keys[j]
			vals[j], vals[j-1] = vals[j-1], vals[j]
		}
	}
	for i, k := range keys {
		col, ok := r.key(k, indent, inline && i == 0)
		if !ok {
			return 0, false
		}
		r.buf = append(r.buf, ' ')
		n := node{kind: 's', s: vals[i]}
		if !r.scalar(&n, col+2, indent+2, true) {
			return 0, false
		}
		r.buf = append(r.buf, '\n')
	}
	return len(keys), true
}

// entry writes "key: value" at indent; info is v's type info, or nil. plainKey says the key
// is known to be written as it is.
func (r *remitter) entry(k string, v reflect.Value, info *typeInfo, indent int, inline, plainKey, addr bool) bool {
	var col int
	if plainKey {
		if !inline {
			r.indent(indent)
		}
		r.buf = append(r.buf, k...)
		r.buf = append(r.buf, ':')
		col = indent + len(k)
	} else {
		var ok bool
		if col, ok = r.key(k, indent, inline); !ok {
			return false
		}
	}
	v, n, class, ok := r.resolve(v, info, addr)
	if !ok {
		return false
	}
	info, addr = r.info, r.addr
	switch class {
	case classNode:
		switch n.kind {
		case 'o':
			if len(n.kids) == 0 {
				r.buf = append(r.buf, " {}\n"...)
				return true
			}
			r.buf = append(r.buf, '\n')
			return r.mapping(&n, indent+2, false)
		case 'a':
			if len(n.kids) == 0 {
				r.buf = append(r.buf, " []\n"...)
				return true
			}
			r.buf = append(r.buf, '\n')
			return r.sequence(&n, indent)
		}
		r.buf = append(r.buf, ' ')
		if !r.scalar(&n, col+2, indent+2, true) {
			return false
		}
		r.buf = append(r.buf, '\n')
		return true
	case classList:
		if v.Len() == 0 {
			r.buf = append(r.buf, " []\n"...)
			return true
		}
		r.buf = append(r.buf, '\n')
		return r.list(v, info, indent, addr)
	}
	// A struct or map: an empty one is "{}" on the key's line.
	pos := len(r.buf)
	r.buf = append(r.buf, '\n')
	wrote, ok := r.entries(v, info, class, indent+2, false, addr)
	if ok && wrote == 0 {
		r.buf = append(r.buf[:pos], " {}\n"...)
	}
	return ok
}

// list writes a slice or array as a sequence at indent.
func (r *remitter) list(v reflect.Value, info *typeInfo, indent int, addr bool) bool {
	if r.depth++; r.depth > maxDepth {
		return false
	}
	ok := r.items(v, info, indent, addr)
	r.depth--
	return ok
}

func (r *remitter) items(v reflect.Value, info *typeInfo, indent int, addr bool) bool {
	elem := info.elemInfo()
	// A slice's elements are addressable to encoding/json; an array's are when it is.
	addr = addr || v.Kind() == reflect.Slice
	for i := range v.Len() {
		r.indent(indent)
		r.buf = append(r.buf, "- "...)
		item, n, class, ok := r.resolve(v.Index(i), elem, addr)
		if !ok {
			return false
		}
		itemInfo, itemAddr := r.info, r.addr
		switch class {
		case classList:
			if item.Len() > 0 {
				return false // a sequence in a sequence
			}
			r.buf = append(r.buf, "[]\n"...)
		case classNode:
			switch n.kind {
			case 'o':
				if len(n.kids) == 0 {
					r.buf = append(r.buf, "{}\n"...)
				} else if !r.mapping(&n, indent+2, true) {
					return false
				}
			case 'a':
				if len(n.kids) > 0 {
					return false
				}
				r.buf = append(r.buf, "[]\n"...)
			default:
				if !r.scalar(&n, indent+2, indent+2, false) {
					return false
				}
				r.buf = append(r.buf, '\n')
			}
		default:
			wrote, ok := r.entries(item, itemInfo, class, indent+2, true, itemAddr)
			if !ok {
				return false
			}
			if wrote == 0 {
				r.buf = append(r.buf, "{}\n"...)
			}
		}
	}
	return true
}

func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	if len(index) == 1 {
		return v.Field(index[0]), true
	}
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// isZero is encoding/json's omitzero test: an IsZero method when the type has one.
func isZero(v reflect.Value, info *typeInfo) bool {
	switch {
	case info.zeroer:
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return true
		}
		return v.Interface().(interface{ IsZero() bool }).IsZero()
	case info.ptrZeroer:
		if !v.CanAddr() { // as encoding/json does: box it to take its address
			boxed := reflect.New(v.Type()).Elem()
			boxed.Set(v)
			v = boxed
		}
		return v.Addr().Interface().(interface{ IsZero() bool }).IsZero()
	}
	return v.IsZero()
}

// field is one JSON field of a struct type.
type field struct {
	name      string
	index     []int
	tagged    bool
	omitEmpty bool
	omitZero  bool
	typ       reflect.Type
	info      *atomic.Pointer[typeInfo] // shared by copies of the field
	plainKey  bool                      // go-yaml writes the name as it is
	// viaPointer: the field is promoted through an embedded pointer, so it is addressable.
	viaPointer bool
}

// typeInfo is the info of the field's type, looked up once.
func (f *field) typeInfo() *typeInfo {
	if i := f.info.Load(); i != nil {
		return i
	}
	i := infoFor(f.typ)
	f.info.Store(i)
	return i
}

// planFields returns the fields encoding/json writes for t, in go-yaml's key order, or nil
// when the type uses something the direct path leaves to the JSON path.
func planFields(t reflect.Type) []field {
	p := typeFields(t)
	slices.SortStableFunc(p, func(a, b field) int {
		switch {
		case keyLess(a.name, b.name):
			return -1
		case keyLess(b.name, a.name):
			return 1
		}
		return 0
	})
	return p
}

// typeFields applies encoding/json's field rules: exported fields, names from tags, fields of
// embedded structs without a tag name promoted, and among fields of one name the shallowest
// wins (a tagged one among equals; an unresolvable tie drops the name). nil: unsupported.
func typeFields(t reflect.Type) []field {
	type level struct {
		typ        reflect.Type
		index      []int
		viaPointer bool
	}
	var all []field
	depthOf := map[string]int{}
	current := []level{{typ: t}}
	visited := map[reflect.Type]bool{}
	for depth := 0; len(current) > 0; depth++ {
		var next []level
		for _, l := range current {
			if visited[l.typ] {
				continue
			}
			visited[l.typ] = true
			for i := range l.typ.NumField() {
				sf := l.typ.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if strings.Contains(","+opts+",", ",string,") {
					return nil
				}
				index := append(slices.Clone(l.index), i)
				if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
					next = append(next, level{typ: ft, index: index,
						viaPointer: l.viaPointer || sf.Type.Kind() == reflect.Pointer})
					continue
				}
				f := field{
					typ:        sf.Type,
					info:       new(atomic.Pointer[typeInfo]),
					viaPointer: l.viaPointer,
					name:       name,
					index:      index,
					tagged:     name != "",
					omitEmpty:  strings.Contains(","+opts+",", ",omitempty,"),
					omitZero:   strings.Contains(","+opts+",", ",omitzero,"),
				}
				if f.name == "" {
					f.name = sf.Name
				}
				f.plainKey = len(f.name) <= 128 && !isInteger(f.name) && !isReservedWord(f.name) && plainSafe(f.name)
				all = append(all, f)
				if d, ok := depthOf[f.name]; !ok || depth < d {
					depthOf[f.name] = depth
				}
			}
		}
		current = next
	}
	return dominant(all, depthOf)
}

// dominant applies encoding/json's dominance rule: per name, the fields at the shallowest
// depth; one tagged field among them wins, otherwise exactly one field must be there.
func dominant(all []field, depthOf map[string]int) []field {
	byName := map[string][]field{}
	var order []string
	for _, f := range all {
		if len(f.index)-1 != depthOf[f.name] {
			continue
		}
		if _, seen := byName[f.name]; !seen {
			order = append(order, f.name)
		}
		byName[f.name] = append(byName[f.name], f)
	}
	out := []field{}
	for _, name := range order {
		fs := byName[name]
		if len(fs) == 1 {
			out = append(out, fs[0])
			continue
		}
		var tagged []field
		for _, f := range fs {
			if f.tagged {
				tagged = append(tagged, f)
			}
		}
		if len(tagged) == 1 {
			out = append(out, tagged[0])
		}
	}
	return out
}
