package fastyaml

// Fast exposes the direct path to the tests: ok is false when it hands the document to go-yaml.
func Fast(j []byte) ([]byte, bool) { return fast(j) }

// Direct exposes the reflection path: ok is false when it leaves v to the JSON path.
func Direct(v any) ([]byte, bool) {
	st := pool.Get().(*state)
	defer pool.Put(st)
	return st.direct(v)
}
