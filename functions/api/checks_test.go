package api

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// prose is ordinary text of the size the checks judge.
var prose = strings.Repeat("The quick brown fox jumps over the lazy dog while a curious cat watches from the fence, "+
	"and somewhere a train whistles past fields of barley, rivers, bridges and quiet towns. ", 6)

func TestCoherence(t *testing.T) {
	for _, tc := range []struct {
		name   string
		deltas []string
		want   string
	}{
		{"prose", []string{prose}, ""},
		{"prose a token at a time", strings.SplitAfter(prose, " "), ""},
		{"short reply", []string{"Yes."}, ""},
		{"code", []string{"func main() {\n\tfmt.Println(\"hello, world\")\n}\n" + prose}, ""},
		{"non-Latin prose", []string{strings.Repeat("東京は日本の首都であり、多くの人々が住んでいます。", 5)}, ""},
		{"a few replacement characters", []string{prose + "\uFFFD\uFFFD"}, ""},
		{"replacement characters", []string{strings.Repeat("ab\uFFFD\uFFFD", 8)}, "replacement_characters"},
		{"one character", []string{strings.Repeat("a", 200)}, "one_character"},
		{"one character with spaces", []string{strings.Repeat("! ", 100)}, "one_character"},
		{"a short run of one character", []string{strings.Repeat("=", 40)}, ""},
		{"a few words repeated", []string{strings.Repeat("buy now ", 80)}, "low_diversity"},
		{"a few words repeated, split mid-word", strings.SplitAfter(strings.Repeat("buy now ", 80), "u"), "low_diversity"},
		{"a list of numbers", []string{func() string {
			var b strings.Builder
			for i := range 200 {
				b.WriteString(strconv.Itoa(i*37) + ", ")
			}
			return b.String()
		}()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r replyStats
			for _, d := range tc.deltas {
				r.add(oaiwire.Delta{Content: d})
			}
			if got := r.incoherent(); got != tc.want {
				t.Errorf("incoherent() = %q, want %q", got, tc.want)
			}
		})
	}
}

// checkWork's claims and speed checks, from what the gateway relayed.
func TestCheckWork(t *testing.T) {
	s := &Server{limits: Limits{MaxTokPerSec: 1000, MaxAttempts: 3}, log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name          string
		deltas, bytes int64
		jobBytes      int
		claim         oaiwire.Usage
		finish        string
		rawSpeed      int64
		want          string
		wantStrikes   int64
	}{
		{"honest", 20, 90, 400, oaiwire.Usage{PromptTokens: 40, CompletionTokens: 21}, "stop", 50_000, "", 0},
		{"tokens grouped in deltas", 10, 200, 400, oaiwire.Usage{PromptTokens: 40, CompletionTokens: 45}, "length", 50_000, "", 0},
		{"completion inflated", 20, 90, 400, oaiwire.Usage{PromptTokens: 40, CompletionTokens: 200}, "stop", 50_000, "usage_inflated", store.ProofStrikes},
		{"prompt inflated", 20, 90, 400, oaiwire.Usage{PromptTokens: 5000, CompletionTokens: 20}, "stop", 50_000, "usage_inflated", store.ProofStrikes},
		{"impossible speed", 200, 900, 400, oaiwire.Usage{CompletionTokens: 200}, "stop", 20_000_000, "impossible_speed", store.ProofStrikes},
		{"empty with stop", 0, 0, 400, oaiwire.Usage{PromptTokens: 40}, "stop", 0, "empty_reply", 0},
		{"empty with length", 0, 0, 400, oaiwire.Usage{PromptTokens: 40}, "length", 0, "empty_reply", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &jobRun{s: s, deltas: tc.deltas, replyBytes: tc.bytes, jobBytes: tc.jobBytes, attempts: 1}
			j.stats.add(oaiwire.Delta{Content: strings.Repeat("word ", int(tc.bytes/5))})
			why, strikes := j.checkWork(&relaymsg.Done{Usage: tc.claim, FinishReason: tc.finish}, tc.rawSpeed)
			if why != tc.want || strikes != tc.wantStrikes {
				t.Errorf("checkWork = %q, %d; want %q, %d", why, strikes, tc.want, tc.wantStrikes)
			}
		})
	}
	off := &jobRun{s: &Server{}, deltas: 200, replyBytes: 900, jobBytes: 400}
	if why, _ := off.checkWork(&relaymsg.Done{Usage: oaiwire.Usage{CompletionTokens: 200}, FinishReason: "stop"}, 20_000_000); why != "" {
		t.Errorf("speed check with MaxTokPerSec 0: %q, want it off", why)
	}
	// An incoherent reply is not rejected (a request can ask for one):
	// its worker becomes a suspect.
	var suspects []string
	s.OnSuspect(func(conn string) { suspects = append(suspects, conn) })
	odd := &jobRun{s: s, worker: "w-odd", deltas: 100, replyBytes: 200, jobBytes: 400, attempts: 1}
	odd.stats.add(oaiwire.Delta{Content: strings.Repeat("a", 200)})
	if why, strikes := odd.checkWork(&relaymsg.Done{FinishReason: "stop", Usage: oaiwire.Usage{CompletionTokens: 100}}, 0); why != "" || strikes != 0 ||
		len(suspects) != 1 || suspects[0] != "w-odd" {
		t.Errorf("an incoherent reply: %q, %d, suspects %v; want accepted and its worker a suspect", why, strikes, suspects)
	}
	last := &jobRun{s: s, jobBytes: 400, attempts: 3}
	if why, _ := last.checkWork(&relaymsg.Done{FinishReason: "stop"}, 0); why != "" {
		t.Errorf("an empty reply on the last attempt: %q, want it delivered", why)
	}
	canary := &jobRun{s: s, job: store.Job{Canary: true}, jobBytes: 400, attempts: 1}
	canary.stats.add(oaiwire.Delta{Content: strings.Repeat("a", 100)})
	if why, _ := canary.checkWork(&relaymsg.Done{FinishReason: "stop"}, 0); why != "" {
		t.Errorf("a canary's odd reply: %q, want it left to the canary's judge", why)
	}
	canary.deltas = 2
	if why, _ := canary.checkWork(&relaymsg.Done{FinishReason: "stop", Usage: oaiwire.Usage{CompletionTokens: 500}}, 0); why != "usage_inflated" {
		t.Errorf("a canary's inflated usage: %q, want usage_inflated", why)
	}
}

func TestNeedsAndRefusals(t *testing.T) {
	image := oaiwire.Content{IsParts: true, Parts: []oaiwire.Part{{Type: "image_url", ImageURL: &oaiwire.ImageURL{URL: "data:image/png;base64,AAAA"}}}}
	long := oaiwire.Content{Text: strings.Repeat("x", 80_000)}
	plain := store.Caps{Context: 2048}
	for _, tc := range []struct {
		name      string
		req       oaiwire.ChatRequest
		online    []store.Caps
		wantWhy   string
		wantParam string
	}{
		{"tools on plain workers", oaiwire.ChatRequest{Tools: []oaiwire.Tool{{Type: "function"}}, Messages: []oaiwire.Message{{Content: oaiwire.Content{Text: "hi"}}}},
			[]store.Caps{plain}, "no worker online for m supports tools", "tools"},
		{"json on plain workers", oaiwire.ChatRequest{ResponseFormat: &oaiwire.ResponseFormat{Type: "json_object"}, Messages: []oaiwire.Message{{Content: oaiwire.Content{Text: "hi"}}}},
			[]store.Caps{plain}, "no worker online for m supports response_format", "response_format"},
		{"image on plain workers", oaiwire.ChatRequest{Messages: []oaiwire.Message{{Content: image}}},
			[]store.Caps{plain}, "no worker online for m supports image input", "messages"},
		{"prompt past the context", oaiwire.ChatRequest{Messages: []oaiwire.Message{{Content: long}}},
			[]store.Caps{plain, {Context: 4096}}, "the messages need at least 10000 tokens of context; the workers online for m have 4096", "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := needsOf(&tc.req)
			why, param := missing("m", n, tc.online)
			if why != tc.wantWhy || param != tc.wantParam {
				t.Errorf("missing = %q, %q; want %q, %q", why, param, tc.wantWhy, tc.wantParam)
			}
		})
	}
	if n := needsOf(&oaiwire.ChatRequest{Messages: []oaiwire.Message{{Content: oaiwire.Content{Text: "hello"}}}}); n != (store.Needs{}) {
		t.Errorf("needs of a plain chat: %+v, want none", n)
	}
}
