// Package fastyaml writes the YAML that sigs.k8s.io/yaml writes, byte for byte, many times
// faster (docs/rendering.md has the figures). sigs.k8s.io/yaml.Marshal encodes to JSON,
// parses that JSON back with a YAML parser and emits it with go-yaml's emitter; that took
// most of a tenant render. fastyaml
// walks the Go value itself with encoding/json's rules (json tags, omitempty and omitzero,
// embedded structs, MarshalJSON) and writes go-yaml's block layout directly. Whatever it is
// not certain to write exactly as go-yaml would (a string go-yaml would fold or quote
// specially, non-ASCII text, a float, []byte, a nested sequence) makes it decline: the document
// then goes through encoding/json and a small JSON reader, and, if that declines too, through
// sigs.k8s.io/yaml itself. The output is always what sigs.k8s.io/yaml would write; the tests
// and fuzzers hold it to that.
package fastyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"sigs.k8s.io/yaml"
)

// state is what one conversion reuses from the last: the JSON buffer and the parser's
// stacks and node arena (the tree of a document is dead once its YAML is written).
type state struct {
	json  bytes.Buffer
	enc   *json.Encoder
	p     parser
	pairs []mapPair
	out   []byte
}

var pool = sync.Pool{New: func() any {
	st := &state{}
	st.enc = json.NewEncoder(&st.json)
	st.enc.SetEscapeHTML(false)
	return st
}}

// Marshal returns yaml.Marshal(v) of sigs.k8s.io/yaml.
func Marshal(v any) ([]byte, error) {
	st := pool.Get().(*state)
	defer pool.Put(st)
	if b, ok := st.direct(v); ok {
		return b, nil
	}
	st.json.Reset()
	if err := st.enc.Encode(v); err != nil {
		return nil, err
	}
	j := st.json.Bytes()
	if b, ok := st.fast(j); ok {
		return b, nil
	}
	return yaml.JSONToYAML(j)
}

// direct writes v's YAML straight from the Go value, without JSON text or a tree in between.
func (st *state) direct(v any) ([]byte, bool) {
	p := &st.p
	r := remitter{emitter: emitter{buf: st.out[:0]}, p: p}
	defer func() {
		clear(p.arena)
		p.arena = p.arena[:0]
		clear(p.nodes)
		p.nodes = p.nodes[:0]
		clear(st.pairs)
		st.pairs = st.pairs[:0]
	}()
	r.pairs = &st.pairs
	ok := r.top(reflect.ValueOf(v))
	st.out = r.buf[:0] // keep the grown buffer for the next document
	if !ok {
		return nil, false
	}
	return append(make([]byte, 0, len(r.buf)), r.buf...), true
}

func (st *state) fast(j []byte) ([]byte, bool) {
	p := &st.p
	p.data, p.pos = j, 0
	p.arena = p.arena[:0]
	defer func() { p.data = nil; clear(p.arena); p.arena = p.arena[:0] }()
	n, err := p.document()
	if err != nil {
		return nil, false
	}
	e := emitter{buf: make([]byte, 0, len(j)+len(j)/4)}
	if !e.top(&n) {
		return nil, false
	}
	return e.buf, true
}

// node is a parsed JSON value. An object's kids are its keys and values in turn (key nodes
// are strings), in go-yaml's key order.
type node struct {
	s    string // string value, number literal, "true" or "false"
	kids []node
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
}

func (n *node) pairs() int { return len(n.kids) / 2 }

// ---- JSON parser: only what encoding/json writes (no comments, no trailing commas). ----

type parser struct {
	data []byte
	pos  int
	// nodes holds the children of the containers being parsed; when a container closes
	// they move to the arena, where every container's children end up side by side.
	nodes []node
	arena []node
}

// close moves the children above mark into the arena and returns them.
func (p *parser) close(mark int) []node {
	start := len(p.arena)
	p.arena = append(p.arena, p.nodes[mark:]...)
	clear(p.nodes[mark:])
	p.nodes = p.nodes[:mark]
	return p.arena[start:len(p.arena):len(p.arena)]
}

var errSyntax = errors.New("fastyaml: unexpected JSON")

func (p *parser) document() (node, error) {
	n, err := p.value()
	if err != nil {
		return n, err
	}
	p.space()
	if p.pos != len(p.data) {
		return n, errSyntax
	}
	return n, nil
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (node, error) {
	p.space()
	if p.pos >= len(p.data) {
		return node{}, errSyntax
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return node{kind: 's', s: s}, err
	case c == 't':
		return p.word("true", 'b')
	case c == 'f':
		return p.word("false", 'b')
	case c == 'n':
		return p.word("null", 'z')
	case c == '-' || c >= '0' && c <= '9':
		start := p.pos
		for p.pos < len(p.data) && strings.IndexByte("+-.eE0123456789", p.data[p.pos]) >= 0 {
			p.pos++
		}
		return node{kind: 'n', s: unsafe.String(&p.data[start], p.pos-start)}, nil
	}
	return node{}, errSyntax
}

func (p *parser) word(w string, kind byte) (node, error) {
	if !strings.HasPrefix(string(p.data[p.pos:min(len(p.data), p.pos+len(w))]), w) {
		return node{}, errSyntax
	}
	p.pos += len(w)
	return node{kind: kind, s: w}, nil
}

func (p *parser) object() (node, error) {
	n := node{kind: 'o'}
	p.pos++ // {
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return n, nil
	}
	mark := len(p.nodes)
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return n, errSyntax
		}
		k, err := p.str()
		if err != nil {
			return n, err
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return n, errSyntax
		}
		p.pos++
		v, err := p.value()
		if err != nil {
			return n, err
		}
		p.nodes = append(p.nodes, node{kind: 's', s: k}, v)
		if done, err := p.separator('}'); err != nil || done {
			n.kids = p.close(mark)
			sortKeys(&n)
			return n, err
		}
	}
}

// separator reads the "," between a container's members (done false) or its closing
// bracket (done true).
func (p *parser) separator(closing byte) (bool, error) {
	p.space()
	if p.pos >= len(p.data) {
		return false, errSyntax
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case closing:
		p.pos++
		return true, nil
	}
	return false, errSyntax
}

func (p *parser) array() (node, error) {
	n := node{kind: 'a'}
	p.pos++ // [
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return n, nil
	}
	mark := len(p.nodes)
	for {
		v, err := p.value()
		if err != nil {
			return n, err
		}
		p.nodes = append(p.nodes, v)
		if done, err := p.separator(']'); err != nil || done {
			n.kids = p.close(mark)
			return n, err
		}
	}
}

// str reads a JSON string at p.pos (the opening quote).
func (p *parser) str() (string, error) {
	p.pos++
	rest := p.data[p.pos:]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return "", errSyntax
	}
	if bytes.IndexByte(rest[:q], '\\') < 0 {
		// No escapes: the string points into the JSON, which outlives it (the emitter copies
		// it into the output and drops the tree).
		p.pos += q + 1
		if q == 0 {
			return "", nil
		}
		return unsafe.String(&rest[0], q), nil
	}
	var b []byte
	for {
		rest = p.data[p.pos:]
		bs := bytes.IndexByte(rest, '\\')
		q := bytes.IndexByte(rest, '"')
		if q < 0 {
			return "", errSyntax
		}
		if bs < 0 || q < bs {
			b = append(b, rest[:q]...)
			p.pos += q + 1
			return string(b), nil
		}
		b = append(b, rest[:bs]...)
		p.pos += bs
		if p.pos+1 >= len(p.data) {
			return "", errSyntax
		}
		p.pos += 2
		switch e := p.data[p.pos-1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", errSyntax
			}
			if utf16IsSurrogate(r) {
				r2 := rune(-1)
				if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					p.pos += 2
					r2, ok = p.hex4()
					if !ok {
						return "", errSyntax
					}
				}
				r = utf16Decode(r, r2)
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", errSyntax
		}
	}
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(v), true
}

func utf16IsSurrogate(r rune) bool { return 0xd800 <= r && r < 0xe000 }

func utf16Decode(r1, r2 rune) rune {
	if 0xd800 <= r1 && r1 < 0xdc00 && 0xdc00 <= r2 && r2 < 0xe000 {
		return (r1-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
	}
	return utf8.RuneError
}

// ---- key order: go-yaml sorts map keys with a "natural" order (letters after other
// characters, digit runs compared as numbers). This is that order, written for strings. ----

func sortKeys(n *node) {
	// Insertion sort of keys and values together: objects are small, and encoding/json
	// mostly hands them over in order already (sorted map keys; struct fields often are).
	kv := n.kids
	for i := 2; i < len(kv); i += 2 {
		for j := i; j > 0 && keyLess(kv[j].s, kv[j-2].s); j -= 2 {
			kv[j], kv[j-2] = kv[j-2], kv[j]
			kv[j+1], kv[j-1] = kv[j-1], kv[j+1]
		}
	}
}

// keyLess orders two keys as go-yaml does.
func keyLess(a, b string) bool {
	return keyLessASCII(a, b, isASCII(a), isASCII(b))
}

// keyLessASCII is keyLess for keys whose ASCII-ness is known.
func keyLessASCII(a, b string, asciiA, asciiB bool) bool {
	if asciiA && asciiB {
		// A read-only byte view of each string: the same order without converting.
		return naturalLess(unsafe.Slice(unsafe.StringData(a), len(a)), unsafe.Slice(unsafe.StringData(b), len(b)))
	}
	return naturalLess([]rune(a), []rune(b))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// naturalLess is go-yaml's key order over bytes (ASCII keys) or runes: letters sort after
// other characters, and runs of digits compare as numbers.
func naturalLess[T byte | rune](a, b []T) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		al, bl := unicode.IsLetter(rune(a[i])), unicode.IsLetter(rune(b[i]))
		if al && bl {
			return a[i] < b[i]
		}
		if al || bl {
			return bl
		}
		// Neither is a letter: compare the digit runs starting here as numbers.
		var an, bn int64
		if a[i] == '0' || b[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(rune(a[j])); j-- {
				if a[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		ai, bi := i, i
		for ; ai < len(a) && unicode.IsDigit(rune(a[ai])); ai++ {
			an = an*10 + int64(a[ai]-'0')
		}
		for ; bi < len(b) && unicode.IsDigit(rune(b[bi])); bi++ {
			bn = bn*10 + int64(b[bi]-'0')
		}
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return a[i] < b[i]
	}
	return len(a) < len(b)
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// ---- emitter: go-yaml's block style with two-space indentation, sequences in mappings not
// indented. Every method returns false when it meets something it will not write itself. ----

type emitter struct {
	buf []byte
}

const bestWidth = 80 // go-yaml folds plain scalars at spaces past this column

func (e *emitter) top(n *node) bool {
	switch n.kind {
	case 'o':
		if len(n.kids) == 0 {
			e.buf = append(e.buf, "{}\n"...)
			return true
		}
		return e.mapping(n, 0, false)
	case 'a':
		if len(n.kids) == 0 {
			e.buf = append(e.buf, "[]\n"...)
			return true
		}
		return e.sequence(n, 0)
	}
	return false // a top-level scalar: rare, leave it to go-yaml
}

// key writes a mapping key at indent (after a "- " already on the line when inline) and its
// colon, and returns the column after the key.
func (e *emitter) key(k string, indent int, inline bool) (int, bool) {
	if !inline {
		e.indent(indent)
	}
	if len(k) > 128 || !e.plainOrQuoted(k, indent, true) {
		return 0, false
	}
	e.buf = append(e.buf, ':')
	return indent + len(k), true
}

// mapping writes n's entries at indent. When inline, the first key follows a "- " already
// written on the current line.
func (e *emitter) mapping(n *node, indent int, inline bool) bool {
	for i := range n.pairs() {
		col, ok := e.key(n.kids[2*i].s, indent, inline && i == 0)
		if !ok {
			return false
		}
		v := &n.kids[2*i+1]
		switch v.kind {
		case 'o':
			if len(v.kids) == 0 {
				e.buf = append(e.buf, " {}\n"...)
				continue
			}
			e.buf = append(e.buf, '\n')
			if !e.mapping(v, indent+2, false) {
				return false
			}
		case 'a':
			if len(v.kids) == 0 {
				e.buf = append(e.buf, " []\n"...)
				continue
			}
			e.buf = append(e.buf, '\n')
			if !e.sequence(v, indent) {
				return false
			}
		default:
			e.buf = append(e.buf, ' ')
			if !e.scalar(v, col+2, indent+2, true) {
				return false
			}
			e.buf = append(e.buf, '\n')
		}
	}
	return true
}

func (e *emitter) sequence(n *node, indent int) bool {
	for i := range n.kids {
		v := &n.kids[i]
		e.indent(indent)
		e.buf = append(e.buf, "- "...)
		switch v.kind {
		case 'o':
			if len(v.kids) == 0 {
				e.buf = append(e.buf, "{}\n"...)
				continue
			}
			if !e.mapping(v, indent+2, true) {
				return false
			}
		case 'a':
			if len(v.kids) == 0 {
				e.buf = append(e.buf, "[]\n"...)
				continue
			}
			return false // a sequence in a sequence
		default:
			if !e.scalar(v, indent+2, indent+2, false) {
				return false
			}
			e.buf = append(e.buf, '\n')
		}
	}
	return true
}

const spaces = "                                                                "

func (e *emitter) indent(n int) {
	for n > len(spaces) {
		e.buf = append(e.buf, spaces...)
		n -= len(spaces)
	}
	e.buf = append(e.buf, spaces[:n]...)
}

// scalar writes a scalar starting at column col; blockIndent is where a literal block's lines
// go, and blocks are allowed only as mapping values.
func (e *emitter) scalar(n *node, col, blockIndent int, blockOK bool) bool {
	switch n.kind {
	case 'b', 'z':
		e.buf = append(e.buf, n.s...)
		return true
	case 'n':
		// Integers only: go-yaml re-formats floats its own way.
		for i := 0; i < len(n.s); i++ {
			if c := n.s[i]; !isDigit(c) && !(i == 0 && c == '-' && len(n.s) > 1) {
				return false
			}
		}
		if len(n.s) > 18 {
			return false // may not fit go-yaml's int
		}
		e.buf = append(e.buf, n.s...)
		return true
	}
	s := n.s
	if strings.IndexByte(s, '\n') >= 0 {
		return blockOK && e.literal(s, blockIndent)
	}
	return e.plainOrQuoted(s, col, false)
}

// plainOrQuoted writes a one-line string the way go-yaml does when it can be certain:
// plain, or double-quoted when a plain scalar would read back as another type.
func (e *emitter) plainOrQuoted(s string, col int, key bool) bool {
	switch {
	case s == "":
		e.buf = append(e.buf, `""`...)
		return true
	case isInteger(s) || isReservedWord(s):
		e.buf = append(e.buf, '"')
		e.buf = append(e.buf, s...)
		e.buf = append(e.buf, '"')
		return true
	}
	if !plainSafe(s) {
		return false
	}
	if !key && wouldFold(s, col) {
		return false
	}
	e.buf = append(e.buf, s...)
	return true
}

func isInteger(s string) bool {
	i := 0
	if s[0] == '-' {
		i = 1
	}
	if i == len(s) || len(s) > 18 {
		return false
	}
	for ; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

// isReservedWord: plain words go-yaml reads as booleans or null.
func isReservedWord(s string) bool {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
		"true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL", "~":
		return true
	}
	return false
}

// plainSafe reports strings go-yaml certainly writes plain: printable ASCII, a first
// character that is no indicator, nothing that reads as a number, timestamp or special
// float, no ": " or " #", no leading, trailing or double spaces.
func plainSafe(s string) bool {
	c := s[0]
	switch {
	case isLetter(c) || c == '_' || c == '/' || c == '$' || c == '(':
	case c == '-':
		// "-" alone or before a space is an indicator; "-" before a digit or '.' may read as
		// a number; "---" starts a document.
		if len(s) < 2 || !(isLetter(s[1]) || s[1] == '-' && !strings.HasPrefix(s, "---")) {
			return false
		}
	case isDigit(c):
		if !quantityLike(s) {
			return false
		}
	default:
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case plainByte[c]:
		case c == ' ':
			if i == len(s)-1 || s[i+1] == ' ' || s[i+1] == '#' {
				return false
			}
		case c == ':':
			if i == len(s)-1 || s[i+1] == ' ' {
				return false
			}
		default: // tabs, control characters, non-ASCII, '#', '?', '[', ']', '{', '}', '\\'
			return false
		}
	}
	return true
}

// plainByte marks the bytes that may follow the first one of a plain scalar anywhere.
var plainByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = isLetter(byte(c)) || isDigit(byte(c)) || strings.IndexByte("-_./=+@%$*()<>,&!~^'\"`;|", byte(c)) >= 0
	}
	return t
}()

// quantityLike accepts digit-first strings such as 200Gi, 5s or 3m: digits, then a unit
// from a fixed list, which go-yaml can read neither as a number nor as a timestamp.
func quantityLike(s string) bool {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	switch s[i:] {
	case "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "m", "s", "h":
		return true
	}
	return false
}

// wouldFold reports whether go-yaml would break this plain scalar across lines: it does at a
// single space between non-spaces once the column passes bestWidth.
func wouldFold(s string, col int) bool {
	if col+len(s) <= bestWidth+1 {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if s[i] == ' ' && col+i > bestWidth {
			return true
		}
	}
	return false
}

// literal writes a multi-line string as a "|" block scalar, when go-yaml would (printable
// ASCII and tabs excluded, no spaces before a line break, no leading space or break, at most
// one trailing break).
func (e *emitter) literal(s string, indent int) bool {
	if s[0] == ' ' || s[0] == '\n' || strings.HasSuffix(s, "\n\n") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' {
			if i > 0 && s[i-1] == ' ' {
				return false
			}
			continue
		}
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	if strings.HasSuffix(s, " ") {
		return false
	}
	e.buf = append(e.buf, '|')
	body := s
	if strings.HasSuffix(s, "\n") {
		body = s[:len(s)-1]
	} else {
		e.buf = append(e.buf, '-')
	}
	e.buf = append(e.buf, '\n')
	for line := range strings.SplitSeq(body, "\n") {
		if line != "" {
			e.indent(indent)
			e.buf = append(e.buf, line...)
		}
		e.buf = append(e.buf, '\n')
	}
	// The caller writes the final line break.
	e.buf = e.buf[:len(e.buf)-1]
	return true
}
