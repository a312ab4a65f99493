package canary

import "testing"

func TestSimilar(t *testing.T) {
	const ref = "bridge lantern quietly orbit meadow copper whistle seven harbor tangle violet"
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{"identical", ref, ref, true},
		{"case and punctuation", ref, "Bridge, lantern; quietly orbit! meadow copper whistle seven harbor tangle violet.", true},
		{"a near tie late", ref, "bridge lantern quietly orbit meadow copper marble fog anchor paper dusk", true},
		{"a near tie early, then the same", ref, "bridge lantern gently orbit meadow copper whistle seven harbor tangle violet", true},
		{"another model", ref, "ember salt crown river basket ladder thunder mirror candle velvet", false},
		{"canned text", ref, "I'm sorry, I can't help with that right now. Please try again later.", false},
		{"a prefix only", ref, "bridge", false},
		{"empty against text", ref, "", false},
		{"both empty", "", "", true},
		{"short and equal", "yes", "Yes.", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := similar(tc.a, tc.b); got != tc.want {
				t.Errorf("similar(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := similar(tc.b, tc.a); got != tc.want {
				t.Errorf("similar is not symmetric for %q", tc.name)
			}
		})
	}
}

func TestAnswered(t *testing.T) {
	for _, tc := range []struct {
		reply   string
		answers []string
		want    bool
	}{
		{"Paris.", []string{"paris"}, true},
		{"The capital of France is Paris, of course.", []string{"paris"}, true},
		{"Parisian food is great.", []string{"paris"}, false},
		{"7 x 8 = 56", []string{"56", "fifty-six"}, true},
		{"Fifty-six!", []string{"56", "fifty-six"}, true},
		{"566", []string{"56"}, false},
		{"Plants take in carbon dioxide.", []string{"co2", "carbon dioxide"}, true},
		{"", []string{"paris"}, false},
	} {
		if got := answered(tc.reply, tc.answers); got != tc.want {
			t.Errorf("answered(%q, %v) = %v, want %v", tc.reply, tc.answers, got, tc.want)
		}
	}
}

// Every known-answer question has answers, and the open-ended corpus is
// varied: no prompt twice.
func TestCorpus(t *testing.T) {
	for _, p := range knownAnswer {
		if len(p.Answers) == 0 || p.User == "" {
			t.Errorf("known-answer prompt %q without answers", p.User)
		}
	}
	seen := map[string]bool{}
	for _, p := range openEnded {
		if seen[p.User] {
			t.Errorf("prompt %q twice", p.User)
		}
		seen[p.User] = true
	}
	if len(openEnded) < 32 {
		t.Errorf("%d open-ended prompts, want at least 32", len(openEnded))
	}
}

func TestKnows(t *testing.T) {
	paris := 0 // "What is the capital of France?"
	for _, tc := range []struct {
		name string
		a    answer
		want bool
	}{
		{"the answer", answer{text: "Paris."}, true},
		{"wrong", answer{text: "Lyon."}, false},
		{"stuffed with every answer", answer{text: "Paris Mars Au 56 seven cold Shakespeare Pacific"}, false},
		{"a thinking model out of tokens", answer{reasoning: "The user asks for the capital of France, which is Paris."}, true},
		{"reasoning stuffed", answer{reasoning: "Paris or Mars or gold Au or 56 or seven or cold"}, false},
		{"reasoning with the wrong answer", answer{reasoning: "France's capital is Lyon"}, false},
	} {
		if got := knows(paris, tc.a); got != tc.want {
			t.Errorf("%s: knows = %v, want %v", tc.name, got, tc.want)
		}
	}
}
