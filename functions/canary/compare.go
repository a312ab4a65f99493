package canary

import (
	"strings"
	"unicode"
)

// maxCompared bounds the words of a reply compared: canaries are short.
const maxCompared = 128

// similarPercent is how much two greedy replies must share (their longest
// common subsequence of words against the longer reply) to be the same
// model's. The same weights on different backends agree word for word
// until a near tie in the logits flips one token, and usually well past
// it; another model, or canned text, shares only the commonest words.
const similarPercent = 50

// agreeWords is a common prefix long enough to agree on its own: two
// replies that match for this many words came from the same weights, even
// if a near tie sent them apart after.
const agreeWords = 6

// similar reports whether two replies to the same greedy canary came from
// the same model.
func similar(a, b string) bool {
	wa, wb := words(a), words(b)
	wa, wb = wa[:min(len(wa), maxCompared)], wb[:min(len(wb), maxCompared)]
	if len(wa) == 0 || len(wb) == 0 {
		return len(wa) == len(wb)
	}
	prefix := 0
	for prefix < min(len(wa), len(wb)) && wa[prefix] == wb[prefix] {
		prefix++
	}
	if prefix >= min(agreeWords, max(len(wa), len(wb))) {
		return true
	}
	return lcs(wa, wb)*100 >= max(len(wa), len(wb))*similarPercent
}

// words splits text into lower-case runs of letters and digits.
func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// lcs is the length of the longest common subsequence of a and b.
func lcs(a, b []string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			if a[i] == b[j] {
				cur[j+1] = prev[j] + 1
			} else {
				cur[j+1] = max(cur[j], prev[j+1])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
