// Package suggest finds the known names closest to one that matches nothing, for "did you
// mean" messages: the same name with a typo or in other case, or names that contain it.
package suggest

import (
	"slices"
	"strings"
)

// Close returns up to three of names close to query, closest first: within a few edits
// (case-insensitive; for "org/repo" ids the repo part alone counts too), else names that
// contain the query.
func Close(query string, names []string) []string {
	q := strings.ToLower(strings.TrimSpace(query))
	_, qRepo, hasOrg := strings.Cut(q, "/")
	if !hasOrg {
		qRepo = q
	}
	type cand struct {
		name string
		dist int
	}
	var cands []cand
	for _, name := range names {
		l := strings.ToLower(name)
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
		cands = append(cands, cand{name, d})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for i := 0; i < len(cands) && i < 3; i++ {
		out = append(out, cands[i].name)
	}
	return out
}

// DidYouMean is "; did you mean a, b?" for the suggestions, or "".
func DidYouMean(suggestions []string) string {
	if len(suggestions) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(suggestions, ", ") + "?"
}

// levenshtein is the edit distance between a and b (bytes; names are ASCII).
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
