// Package suggest finds the name a misspelt one was probably meant to be,
// for "did you mean" hints in validation problems.
package suggest

import "strings"

// Closest returns the name closest to word when it is plausibly a typo:
// equal ignoring case, '_' and '-', or within a small edit distance.
func Closest(word string, names []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	for _, n := range names {
		if norm(n) == norm(word) {
			return n
		}
	}
	// "attempts" for "max_attempts", "delay" for "fixed_delay": a unique
	// name that is word with a prefix or suffix.
	affix := ""
	for _, n := range names {
		if strings.HasSuffix(n, "_"+word) || strings.HasPrefix(n, word+"_") {
			if affix != "" {
				affix = ""
				break
			}
			affix = n
		}
	}
	if affix != "" {
		return affix
	}
	best, bestD := "", 0
	for _, n := range names {
		dist := editDistance(strings.ToLower(word), n)
		limit := 2
		if len(n) <= 4 {
			limit = 1
		}
		if dist <= limit && (best == "" || dist < bestD) {
			best, bestD = n, dist
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (Levenshtein plus
// adjacent transpositions) between a and b, over bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev2 := make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
