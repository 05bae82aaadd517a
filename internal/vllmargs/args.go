// Package vllmargs reads and merges vLLM serving command lines: the one parser of its flags
// for recipe derivation, the plan, the policy's GPU rules and the renderer. A flag is a token
// starting with "-" that is not a number; "--flag=value" and "--flag value" are the same flag.
package vllmargs

import (
	"strconv"
	"strings"
)

// Merge concatenates argument lists and keeps only the last occurrence of every flag,
// the way the upstream command builder does, so a later source (variant, hardware, feature,
// a job's extra args) overrides an earlier one without leaving a stale pair behind.
//
// A flag is a token starting with "-" that is not a number. `--flag=value` is one unit whose
// flag is the part before "="; `--flag value` is a unit when the next token is not a flag;
// otherwise the flag is a boolean. `--flag=value` and `--flag value` are the same flag.
// Tokens that follow no flag are positional and always kept. The surviving units keep the
// position of their last occurrence, and the order of everything else is unchanged.
func Merge(lists ...[]string) []string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	type unit struct {
		flag   string // "" for a positional token
		tokens []string
	}
	units := make([]unit, 0, len(all))
	for i := 0; i < len(all); i++ {
		tok := all[i]
		if !IsFlag(tok) {
			units = append(units, unit{tokens: []string{tok}})
			continue
		}
		if name, _, inline := strings.Cut(tok, "="); inline {
			units = append(units, unit{flag: name, tokens: []string{tok}})
			continue
		}
		if i+1 < len(all) && !IsFlag(all[i+1]) {
			units = append(units, unit{flag: tok, tokens: []string{tok, all[i+1]}})
			i++
			continue
		}
		units = append(units, unit{flag: tok, tokens: []string{tok}})
	}
	seen := map[string]bool{}
	keep := make([]bool, len(units))
	for i := len(units) - 1; i >= 0; i-- {
		u := units[i]
		if u.flag == "" || !seen[u.flag] {
			keep[i] = true
			seen[u.flag] = u.flag != ""
		}
	}
	out := make([]string, 0, len(all))
	for i, u := range units {
		if keep[i] {
			out = append(out, u.tokens...)
		}
	}
	return out
}

// IsFlag reports whether tok names a flag (and is not, say, the value -1).
func IsFlag(tok string) bool {
	if len(tok) < 2 || tok[0] != '-' {
		return false
	}
	if _, err := strconv.ParseFloat(tok, 64); err == nil {
		return false
	}
	return true
}

// Value returns the value the last occurrence of flag has in args (`--flag v` or
// `--flag=v`), and whether the flag is present with a value.
func Value(args []string, flag string) (string, bool) {
	val, found := "", false
	for i := 0; i < len(args); i++ {
		tok := args[i]
		if tok == flag && i+1 < len(args) && !IsFlag(args[i+1]) {
			val, found = args[i+1], true
			i++
		} else if v, ok := strings.CutPrefix(tok, flag+"="); ok {
			val, found = v, true
		}
	}
	return val, found
}
