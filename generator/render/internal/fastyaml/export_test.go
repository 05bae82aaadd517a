package fastyaml

import "sigs.k8s.io/yaml"

// Fast exposes the direct path to the tests: ok is false when it hands the document to go-yaml.
func Fast(j []byte) ([]byte, bool) {
	st := pool.Get().(*state)
	defer pool.Put(st)
	return st.fast(j)
}

// Direct exposes the reflection path: ok is false when it leaves v to the JSON path.
func Direct(v any) ([]byte, bool) {
	st := pool.Get().(*state)
	defer pool.Put(st)
	return st.direct(v)
}

// FromJSON is Marshal's JSON path alone: yaml.JSONToYAML(j) of sigs.k8s.io/yaml for the JSON
// encoding/json writes, through the small JSON reader when it does not decline. The tests and
// the fuzzer hold that path to go-yaml's output directly.
func FromJSON(j []byte) ([]byte, error) {
	if b, ok := Fast(j); ok {
		return b, nil
	}
	return yaml.JSONToYAML(j)
}
