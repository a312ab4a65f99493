package credential

import (
	"strings"
	"testing"
)

func TestNewIsWellFormedAndHashed(t *testing.T) {
	for _, prefix := range []string{APIKeyPrefix, WorkerTokenPrefix} {
		secret, hash, id := New(prefix)
		if !strings.HasPrefix(secret, prefix) || !WellFormed(prefix, secret) {
			t.Errorf("%s: %q not well formed", prefix, secret)
		}
		if hash != Hash(secret) || len(hash) != 64 {
			t.Errorf("%s: hash %q", prefix, hash)
		}
		if strings.Contains(id, secret[len(prefix):len(prefix)+8]) || !strings.Contains(hash, id[strings.Index(id, "_")+1:]) {
			t.Errorf("%s: id %q must come from the hash, not the secret", prefix, id)
		}
		other, _, _ := New(prefix)
		if other == secret {
			t.Errorf("%s: two secrets equal", prefix)
		}
	}
}

func TestWellFormed(t *testing.T) {
	good, _, _ := New(APIKeyPrefix)
	for _, c := range []struct {
		s    string
		want bool
	}{
		{good, true},
		{"", false},
		{APIKeyPrefix, false},
		{good + "x", false},
		{good[:len(good)-1], false},
		{"sk-other-" + good[len(APIKeyPrefix):], false},
		{APIKeyPrefix + strings.Repeat("!", 43), false},
		{strings.Replace(good, APIKeyPrefix, WorkerTokenPrefix, 1), false},
	} {
		if got := WellFormed(APIKeyPrefix, c.s); got != c.want {
			t.Errorf("WellFormed(%q) = %v", c.s, got)
		}
	}
}

func TestBearer(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer  abc ": "abc",
		"Basic abc":    "",
		"abc":          "",
		"":             "",
	} {
		if got := Bearer(in); got != want {
			t.Errorf("Bearer(%q) = %q, want %q", in, got, want)
		}
	}
}
