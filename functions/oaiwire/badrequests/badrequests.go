// Package badrequests is the corpus of malformed chat requests and the
// error each must get. The decoder's tests and the gateway's end-to-end
// tests both run it, so the two can never drift apart.
//
// corpus/ holds a <name>.json body per case and expected.txt, one
// "<name> <status> <param>" line per case ("-" for a null param); Cases
// adds the cases too large to commit.
package badrequests

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

//go:embed corpus
var corpus embed.FS

// Case is one malformed request and the error it must get.
type Case struct {
	Name   string
	Body   []byte
	Status int
	Param  string // "" for a null param
}

// Cases returns the whole corpus. Every body must have its line in
// expected.txt and every line its body.
func Cases() ([]Case, error) {
	list, err := corpus.ReadFile("corpus/expected.txt")
	if err != nil {
		return nil, err
	}
	var cases []Case
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(list))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("expected.txt: bad line %q", line)
		}
		status, err := strconv.Atoi(fields[1])
		if err != nil {
			return nil, fmt.Errorf("expected.txt: bad status in %q", line)
		}
		param := fields[2]
		if param == "-" {
			param = ""
		}
		if seen[fields[0]] {
			return nil, fmt.Errorf("expected.txt: %s twice", fields[0])
		}
		seen[fields[0]] = true
		body, err := corpus.ReadFile("corpus/" + fields[0] + ".json")
		if err != nil {
			return nil, fmt.Errorf("expected.txt names %s: %w", fields[0], err)
		}
		cases = append(cases, Case{Name: fields[0], Body: body, Status: status, Param: param})
	}
	files, err := fs.Glob(corpus, "corpus/*.json")
	if err != nil {
		return nil, err
	}
	for _, p := range files {
		if name := strings.TrimSuffix(path.Base(p), ".json"); !seen[name] {
			return nil, fmt.Errorf("%s has no line in expected.txt", p)
		}
	}
	return append(cases, generated()...), nil
}

// generated are the cases too large to commit.
func generated() []Case {
	valid := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
	var many bytes.Buffer
	many.WriteString(`{"model":"tiny","messages":[`)
	for i := range 2049 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(`{"role":"user","content":"hi"}`)
	}
	many.WriteString(`]}`)
	return []Case{
		// One byte over: the decoder reads it all, nothing is left unread.
		{Name: "gen-body-one-byte-over-max", Status: http.StatusRequestEntityTooLarge,
			Body: append([]byte(valid), bytes.Repeat([]byte(" "), oaiwire.MaxBody+1-len(valid))...)},
		// Far over, in one string: most of it stays unread.
		{Name: "gen-body-far-over-max", Status: http.StatusRequestEntityTooLarge,
			Body: []byte(`{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("a", oaiwire.MaxBody+1<<20) + `"}]}`)},
		{Name: "gen-messages-too-many", Status: http.StatusBadRequest, Param: "messages", Body: many.Bytes()},
		// A prediction one byte over its bound, in one string and across
		// parts, and one part too many.
		{Name: "gen-prediction-one-byte-over", Status: http.StatusBadRequest, Param: "prediction.content",
			Body: withPrediction(strconv.Quote(strings.Repeat("p", oaiwire.MaxPredictionBytes+1)))},
		{Name: "gen-prediction-parts-one-byte-over", Status: http.StatusBadRequest, Param: "prediction.content",
			Body: withPrediction(textParts(oaiwire.MaxPredictionParts, oaiwire.MaxPredictionBytes+1))},
		{Name: "gen-prediction-parts-too-many", Status: http.StatusBadRequest, Param: "prediction.content",
			Body: withPrediction(textParts(oaiwire.MaxPredictionParts+1, oaiwire.MaxPredictionParts+1))},
	}
}

// withPrediction is a valid request whose prediction content is the JSON
// value content.
func withPrediction(content string) []byte {
	return []byte(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":` + content + `}}`)
}

// textParts is a JSON array of n text parts holding size bytes of text
// together (size >= n).
func textParts(n, size int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		l := size / n
		if i < size%n {
			l++
		}
		b.WriteString(`{"type":"text","text":"` + strings.Repeat("p", l) + `"}`)
	}
	b.WriteByte(']')
	return b.String()
}
