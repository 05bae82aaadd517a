package recipe

// Suggest returns up to three names close to query (a typo away, or containing it), for
// "did you mean" in messages about any kind of name.
func Suggest(query string, names []string) []string { return suggest(query, names) }
