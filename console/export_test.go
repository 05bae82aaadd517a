package console

// Patterns are the console's routes, as registered: the tests send every write without its
// CSRF token, and from another site.
func (h *Handler) Patterns() []string { return h.patterns }
