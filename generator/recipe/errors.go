package recipe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kinds of derivation errors, for errors.Is.
var (
	ErrUnknownModel         = errors.New("unknown model")
	ErrUnknownVariant       = errors.New("unknown variant")
	ErrUnknownStrategy      = errors.New("unknown strategy")
	ErrIncompatibleStrategy = errors.New("incompatible strategy")
	ErrStrategyUnavailable  = errors.New("strategy not available in this recipes tree")
	ErrUnsupportedStrategy  = errors.New("strategy not supported by inferplane")
	ErrUnknownHardware      = errors.New("unknown hardware profile")
	ErrUnsupportedHardware  = errors.New("hardware not supported by the recipe")
	ErrUnknownFeature       = errors.New("unknown feature")
	ErrDoesNotFit           = errors.New("model does not fit")
	ErrUnsupportedRecipe    = errors.New("recipe not supported by inferplane")
)

// Error is a derivation error: what went wrong (Kind), which request field it concerns
// ("model", "variant", "strategy", "hardware", "features", "nodes"), and a message that names
// what is unknown and lists what exists.
type Error struct {
	Kind  error
	Field string
	Msg   string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

func newError(kind error, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// list formats names for a message: "a, b, c", or "none".
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// suggest returns up to three ids close to query: the same id with a typo, or ids that
// contain what was asked for.
func suggest(query string, ids []string) []string {
	q := strings.ToLower(strings.TrimSpace(query))
	_, qRepo, hasOrg := strings.Cut(q, "/")
	if !hasOrg {
		qRepo = q
	}
	type cand struct {
		id   string
		dist int
	}
	var cands []cand
	for _, id := range ids {
		l := strings.ToLower(id)
		_, repo, _ := strings.Cut(l, "/")
		d := min(levenshtein(q, l), levenshtein(qRepo, repo))
		limit := max(2, len(qRepo)/4)
		switch {
		case d <= limit:
		case qRepo != "" && len(qRepo) >= 3 && strings.Contains(repo, qRepo):
			d = limit + 1 + len(repo) - len(qRepo)
		default:
			continue
		}
		cands = append(cands, cand{id, d})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return strings.Compare(a.id, b.id)
	})
	var out []string
	for i := 0; i < len(cands) && i < 3; i++ {
		out = append(out, cands[i].id)
	}
	return out
}

// levenshtein is the edit distance between a and b (bytes; ids are ASCII).
func levenshtein(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
