package productapi

import (
	"bytes"
	"errors"

	"go.yaml.in/yaml/v3"
)

// The API edits input files as YAML nodes, so that what it does not change (comments, order,
// the operator's formatting) stays as written.

// editSpecYAML applies edit to the spec of a YAML object, keeping its comments and the rest as
// written.
func editSpecYAML(data []byte, edit func(spec *yaml.Node) error) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a YAML object")
	}
	spec := mapValue(doc.Content[0], "spec")
	if spec == nil || spec.Kind != yaml.MappingNode {
		return nil, errors.New("no spec")
	}
	if err := edit(spec); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// setScalar sets key of mapping m to val (nil: removes it).
func setScalar(m *yaml.Node, key string, val *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			if val == nil {
				m.Content = append(m.Content[:i], m.Content[i+2:]...)
			} else {
				*m.Content[i+1] = *val
			}
			return
		}
	}
	if val != nil {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, val)
	}
}

// mapValue is the value of key in mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
