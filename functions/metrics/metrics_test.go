package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// fixed is the clock of the golden records.
var fixed = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newFixed(w *bytes.Buffer, namespace string) *Emitter {
	e := New(w, namespace)
	e.now = func() time.Time { return fixed }
	return e
}

// The records as written, byte for byte: the lead's alarms and the
// dashboard read these names and dimension sets.
func TestGolden(t *testing.T) {
	var buf bytes.Buffer
	e := newFixed(&buf, "c0mpute/test")
	e.Put([]Dim{{"Model", "c0mpute-pro"}},
		Metric{Requests, UnitCount, 1}, Metric{Duration, UnitMilliseconds, 1234.5},
		Metric{TTFT, UnitMilliseconds, 87}, Metric{PromptTokens, UnitCount, 12}, Metric{CompletionTokens, UnitCount, 340})
	e.Put([]Dim{{"Code", "rate_limit_exceeded"}}, Metric{Errors, UnitCount, 1})
	e.Put(nil, Metric{ServerErrors, UnitCount, 1})
	e.Put([]Dim{{"Job", "payouts"}, {"Outcome", "success"}}, Metric{KeeperRuns, UnitCount, 1})
	e.Put(nil, Metric{TreasuryUSDC, "", 12345678901}, Metric{TreasuryLamports, UnitNone, 1e22})
	(&Gauges{Emitter: e}).Put([]string{"c0mpute-pro", "c0mpute-mini"}, map[string]int64{"c0mpute-pro": 3}, map[string]int64{"c0mpute-pro": 2})
	// Escaping: a value is JSON-escaped, never able to break the line.
	e.Put([]Dim{{"Model", "a\"b\n<c>"}}, Metric{Requests, UnitCount, 1})

	golden := filepath.Join("testdata", "records.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("records differ from %s (go test -update to rewrite)\ngot:\n%s\nwant:\n%s", golden, got, want)
	}
	for _, line := range records(t, buf.Bytes()) {
		checkSpec(t, line)
	}
}

// records splits output into lines and decodes each as one JSON object.
func records(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not one JSON object: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	return recs
}

// checkSpec checks a record against the EMF specification's rules: every
// dimension named in a set and every metric named are top-level members,
// dimensions strings, metrics numbers; sets [all] and [].
func checkSpec(t *testing.T, rec map[string]any) {
	t.Helper()
	aws, ok := rec["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("no _aws object: %v", rec)
	}
	if _, ok := aws["Timestamp"].(float64); !ok {
		t.Errorf("no numeric Timestamp: %v", aws)
	}
	dirs, ok := aws["CloudWatchMetrics"].([]any)
	if !ok || len(dirs) != 1 {
		t.Fatalf("want one directive: %v", aws)
	}
	dir := dirs[0].(map[string]any)
	if ns, _ := dir["Namespace"].(string); ns == "" {
		t.Errorf("no namespace: %v", dir)
	}
	sets := dir["Dimensions"].([]any)
	if last := sets[len(sets)-1].([]any); len(last) != 0 {
		t.Errorf("the last dimension set is not the aggregate []: %v", sets)
	}
	for _, set := range sets {
		for _, d := range set.([]any) {
			if _, ok := rec[d.(string)].(string); !ok {
				t.Errorf("dimension %v is not a string member: %v", d, rec)
			}
		}
	}
	ms := dir["Metrics"].([]any)
	if len(ms) == 0 || len(ms) > maxMetrics {
		t.Errorf("%d metric definitions", len(ms))
	}
	for _, m := range ms {
		name := m.(map[string]any)["Name"].(string)
		if _, ok := rec[name].(float64); !ok {
			t.Errorf("metric %s is not a number member: %v", name, rec)
		}
	}
}

func TestNilEmitterDropsEverything(t *testing.T) {
	var e *Emitter
	e.Put([]Dim{{"Model", "m"}}, Metric{Requests, UnitCount, 1}) // must not panic
	if New(nil, "x") != nil {
		t.Error("New(nil, …) is not the nil emitter")
	}
	var g *Gauges
	if g.Due(time.Now()) {
		t.Error("a nil Gauges is due")
	}
	if (&Gauges{}).Due(time.Now()) {
		t.Error("Gauges without an emitter is due")
	}
}

func TestNamespace(t *testing.T) {
	for _, tc := range []struct{ env, want string }{{"", DefaultNamespace}, {"c0mpute/prod", "c0mpute/prod"}} {
		t.Setenv(EnvNamespace, tc.env)
		var buf bytes.Buffer
		FromEnv(&buf).Put(nil, Metric{ServerErrors, UnitCount, 1})
		rec := records(t, buf.Bytes())[0]
		got := rec["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Namespace"]
		if got != tc.want {
			t.Errorf("%s=%q: namespace %v, want %q", EnvNamespace, tc.env, got, tc.want)
		}
	}
}

// What the format cannot carry is left out, or written as "other", and
// never breaks the record or loses its aggregate series.
func TestPutValidates(t *testing.T) {
	long := strings.Repeat("x", maxDimValue+1)
	for _, tc := range []struct {
		name        string
		dims        []Dim
		ms          []Metric
		wantLines   int
		wantDims    []string // the first set
		wantMetrics []string
		wantValue   map[string]any
	}{
		{"no metrics", []Dim{{"Model", "m"}}, nil, 0, nil, nil, nil},
		{"only invalid metrics", nil, []Metric{{"", UnitCount, 1}, {Requests, UnitCount, math.NaN()}, {Duration, UnitCount, math.Inf(1)}}, 0, nil, nil, nil},
		{"a repeated metric keeps the first", nil, []Metric{{Requests, UnitCount, 1}, {Requests, UnitCount, 2}}, 1, nil, []string{Requests}, map[string]any{Requests: 1.0}},
		{"empty unit is None", nil, []Metric{{QueueDepth, "", 4}}, 1, nil, []string{QueueDepth}, nil},
		{"empty and long values are other", []Dim{{"Model", ""}, {"Code", long}}, []Metric{{Requests, UnitCount, 1}}, 1,
			[]string{"Model", "Code"}, []string{Requests}, map[string]any{"Model": "other", "Code": "other"}},
		{"bad dimension names are left out", []Dim{{"", "v"}, {"_aws", "v"}, {Requests, "v"}, {"Model", "a"}, {"Model", "b"}}, []Metric{{Requests, UnitCount, 1}}, 1,
			[]string{"Model"}, []string{Requests}, map[string]any{"Model": "a"}},
		{"more than 100 metrics are split", nil, func() []Metric {
			var ms []Metric
			for i := range 150 {
				ms = append(ms, Metric{fmt.Sprintf("m%03d", i), UnitCount, float64(i)})
			}
			return ms
		}(), 2, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			newFixed(&buf, "").Put(tc.dims, tc.ms...)
			recs := records(t, buf.Bytes())
			if len(recs) != tc.wantLines {
				t.Fatalf("%d records, want %d:\n%s", len(recs), tc.wantLines, buf.String())
			}
			for _, rec := range recs {
				checkSpec(t, rec)
			}
			if len(recs) == 0 {
				return
			}
			dir := recs[0]["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
			sets := dir["Dimensions"].([]any)
			var gotDims []string
			if len(sets) == 2 {
				for _, d := range sets[0].([]any) {
					gotDims = append(gotDims, d.(string))
				}
			}
			if !slices.Equal(gotDims, tc.wantDims) {
				t.Errorf("dimensions %v, want %v", gotDims, tc.wantDims)
			}
			if tc.wantMetrics != nil {
				var got []string
				for _, m := range dir["Metrics"].([]any) {
					got = append(got, m.(map[string]any)["Name"].(string))
					if u := m.(map[string]any)["Unit"]; u == "" {
						t.Errorf("empty unit: %v", m)
					}
				}
				if !slices.Equal(got, tc.wantMetrics) {
					t.Errorf("metrics %v, want %v", got, tc.wantMetrics)
				}
			}
			for k, v := range tc.wantValue {
				if recs[0][k] != v {
					t.Errorf("%s = %v, want %v", k, recs[0][k], v)
				}
			}
		})
	}
}

// Concurrent Puts write whole lines: none interleaves with another.
func TestConcurrentPutsNeverInterleave(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "")
	const writers, each = 16, 200
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			for j := range each {
				e.Put([]Dim{{"Model", fmt.Sprintf("model-%d", i)}},
					Metric{Requests, UnitCount, 1}, Metric{Duration, UnitMilliseconds, float64(j)})
			}
		})
	}
	wg.Wait()
	recs := records(t, buf.Bytes())
	if len(recs) != writers*each {
		t.Fatalf("%d records, want %d", len(recs), writers*each)
	}
	perModel := map[any]int{}
	for _, rec := range recs {
		checkSpec(t, rec)
		perModel[rec["Model"]]++
	}
	for model, n := range perModel {
		if n != each {
			t.Errorf("%v: %d records, want %d", model, n, each)
		}
	}
}

func TestGaugesDueOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	g := &Gauges{Emitter: New(&buf, "")}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {time.Second, false}, {59 * time.Second, false}, {60 * time.Second, true}, {61 * time.Second, false},
		{-time.Hour, true}, // a clock that went back lets one through and starts again
		{-time.Hour + time.Second, false}} {
		if got := g.Due(start.Add(tc.at)); got != tc.want {
			t.Errorf("Due at %v = %v, want %v", tc.at, got, tc.want)
		}
	}
	// Of many concurrent callers, one is told yes.
	g = &Gauges{Emitter: New(&buf, "")}
	var mu sync.Mutex
	yes := 0
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			if g.Due(start) {
				mu.Lock()
				yes++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if yes != 1 {
		t.Errorf("%d concurrent callers were told the gauges are due, want 1", yes)
	}
}

// Every name in Names is unique and used by code outside the tests: a
// metric nobody emits would leave its alarm without data for ever.
func TestNamesAreUniqueAndEmitted(t *testing.T) {
	consts := constIdents(t)
	seen := map[string]bool{}
	for _, n := range Names {
		if seen[n] {
			t.Errorf("%s listed twice in Names", n)
		}
		seen[n] = true
	}
	if len(Names) != len(consts) {
		t.Errorf("Names has %d names, the const block %d", len(Names), len(consts))
	}
	root := moduleRoot(t)
	used := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for ident := range consts {
			if bytes.Contains(b, []byte("metrics."+ident)) {
				used[ident] = true
			}
		}
		// The gauges are written here, by Gauges.Put, for those who
		// call it.
		if bytes.Contains(b, []byte(".gauges.Put(")) {
			used["QueueDepth"], used["OnlineWorkers"] = true, true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for ident, name := range consts {
		if !used[ident] {
			t.Errorf("metric %s (metrics.%s) is emitted nowhere", name, ident)
		}
	}
}

// constIdents maps the identifiers of the const block that Names lists to
// their values.
func constIdents(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range Names {
		names[n] = true
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, id := range vs.Names {
			if i < len(vs.Values) {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING && names[strings.Trim(lit.Value, `"`)] {
					out[id.Name] = strings.Trim(lit.Value, `"`)
				}
			}
		}
		return true
	})
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = parent
	}
}
