package terraform

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/metrics"
)

// awsNamespaces are the AWS services' own metrics the alarms may read.
var awsNamespaces = []string{"AWS/Lambda", "AWS/ApiGateway", "AWS/SQS", "AWS/DynamoDB"}

// alarmMetrics lists the (namespace, metric) pairs an alarm reads, from its
// own attributes or its metric queries (dynamic ones included). A
// namespace that is local.metrics_namespace reads as "c0mpute".
func alarmMetrics(t *testing.T, a *hclsyntax.Block) [][2]string {
	t.Helper()
	var out [][2]string
	read := func(b *hclsyntax.Block) {
		if _, ok := b.Body.Attributes["metric_name"]; !ok {
			return
		}
		ns := "c0mpute"
		if r := refs(t, b, "namespace"); !slices.Equal(r, []string{"local.metrics_namespace"}) {
			ns = str(t, b, "namespace")
		}
		name := "?"
		if v, d := b.Body.Attributes["metric_name"].Expr.Value(nil); !d.HasErrors() {
			name = v.AsString()
		} else {
			// A dynamic block's metric_query.value.metric: the for_each
			// map's metric names, checked one by one.
			for _, m := range dynamicMetricNames(t, a) {
				out = append(out, [2]string{ns, m})
			}
			return
		}
		out = append(out, [2]string{ns, name})
	}
	read(a)
	var walk func(b *hclsyntax.Block)
	walk = func(b *hclsyntax.Block) {
		for _, c := range b.Body.Blocks {
			if c.Type == "metric" {
				read(c)
			}
			walk(c)
		}
	}
	walk(a)
	return out
}

func dynamicMetricNames(t *testing.T, a *hclsyntax.Block) []string {
	t.Helper()
	var out []string
	for _, d := range children(a, "dynamic") {
		obj, ok := d.Body.Attributes["for_each"].Expr.(*hclsyntax.ObjectConsExpr)
		if !ok {
			t.Fatalf("%v: dynamic for_each is not an object", a.Labels)
		}
		for _, it := range obj.Items {
			inner, ok := it.ValueExpr.(*hclsyntax.ObjectConsExpr)
			if !ok {
				continue
			}
			for _, f := range inner.Items {
				k, _ := f.KeyExpr.Value(nil)
				if k.Type() == cty.String && k.AsString() == "metric" {
					v, _ := f.ValueExpr.Value(nil)
					out = append(out, v.AsString())
				}
			}
		}
	}
	return out
}

// TestAlarms: every alarm reads a metric that exists — an AWS service's,
// or one of the code's own (functions/metrics.Names, the names the code
// emits) — notifies the alarm topic, and has a runbook entry in README.md.
func TestAlarms(t *testing.T) {
	c := load(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	alarms := c.all("resource", "aws_cloudwatch_metric_alarm")
	if len(alarms) < 10 {
		t.Fatalf("%d alarms", len(alarms))
	}
	runbook := regexp.MustCompile(`Runbook: terraform/README\.md, Alarms, ([a-z-]+)\.`)
	for _, a := range alarms {
		name := a.Labels[1]
		ms := alarmMetrics(t, a)
		if len(ms) == 0 {
			t.Errorf("%s reads no metric", name)
		}
		for _, m := range ms {
			switch {
			case m[0] == "c0mpute":
				if !slices.Contains(metrics.Names, m[1]) {
					t.Errorf("%s reads %s, which the code never emits (functions/metrics.Names)", name, m[1])
				}
			case !slices.Contains(awsNamespaces, m[0]):
				t.Errorf("%s reads namespace %s", name, m[0])
			}
		}
		if r := refs(t, a, "alarm_actions"); !slices.Equal(r, []string{"local.alarm_actions"}) {
			t.Errorf("%s notifies %v, want local.alarm_actions", name, r)
		}
		desc := a.Body.Attributes["alarm_description"].Expr
		src := string(desc.Range().SliceBytes(mustRead(t, desc.Range().Filename)))
		sub := runbook.FindStringSubmatch(src)
		if sub == nil {
			t.Errorf("%s: description without \"Runbook: terraform/README.md, Alarms, NAME.\"", name)
			continue
		}
		if !strings.Contains(string(readme), "\n### "+sub[1]+"\n") {
			t.Errorf("%s: README.md has no runbook section \"### %s\"", name, sub[1])
		}
	}
	// Every metric name the code emits is one a dashboard graph or an
	// alarm can find: a typo in either place shows here.
	dash, err := os.ReadFile("dashboard.tf")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range metrics.Names {
		if !strings.Contains(string(dash), `"`+n+`"`) && !strings.Contains(string(dash), `\"`+n+`\"`) {
			t.Errorf("metric %s is on no dashboard graph", n)
		}
	}
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAlarmTopicByDefault: with alarm_topic_arn empty (the default) an SNS
// topic is created, so that an alarm always reaches somewhere.
func TestAlarmTopicByDefault(t *testing.T) {
	c := load(t)
	v := mustBlock(t, c, "variable", "alarm_topic_arn")
	if d := literal(t, v, "default"); d.AsString() != "" {
		t.Fatalf("alarm_topic_arn defaults to %q", d.AsString())
	}
	topic := mustBlock(t, c, "resource", "aws_sns_topic", "alarms")
	n, d := topic.Body.Attributes["count"].Expr.Value(hclEval{vars: map[string]cty.Value{"alarm_topic_arn": cty.StringVal("")}}.ctx())
	if d.HasErrors() || !n.Equals(cty.NumberIntVal(1)).True() {
		t.Fatalf("topic count %v %v with alarm_topic_arn empty, want 1", n, d)
	}
}

// TestKeeperRunsEndVisibly: whatever a schedule invokes has an on-failure
// destination for the runs that fail every retry, the destination alarms,
// and the schedule's own dead-letter queue alarms too.
func TestKeeperRunsEndVisibly(t *testing.T) {
	c := load(t)
	alarmed := map[string]bool{}
	for _, a := range c.all("resource", "aws_cloudwatch_metric_alarm") {
		ns, ok := a.Body.Attributes["namespace"]
		if v, d := (cty.Value{}), hcl.Diagnostics(nil); ok {
			v, d = ns.Expr.Value(nil)
			ok = !d.HasErrors() && v.AsString() == "AWS/SQS"
		}
		if ok {
			for _, r := range refs(t, a, "dimensions") {
				alarmed[strings.TrimSuffix(r, ".name")] = true
			}
		}
	}
	for _, s := range c.all("resource", "aws_scheduler_schedule") {
		tg := child(t, s, "target")
		fn := strings.TrimSuffix(refs(t, tg, "arn")[0], ".arn") // aws_lambda_function.keeper
		var cfg *hclsyntax.Block
		for _, e := range c.all("resource", "aws_lambda_function_event_invoke_config") {
			if slices.Equal(refs(t, e, "function_name"), []string{fn + ".function_name"}) {
				cfg = e
			}
		}
		if cfg == nil {
			t.Fatalf("%s invokes %s asynchronously and nothing catches its failed runs: no aws_lambda_function_event_invoke_config", s.Labels[1], fn)
		}
		if n := literal(t, cfg, "maximum_retry_attempts"); !n.Equals(cty.NumberIntVal(2)).True() {
			t.Errorf("keeper retries %v times, want 2 (each resumes from the ledger)", n.AsBigFloat())
		}
		dest := refs(t, child(t, child(t, cfg, "destination_config"), "on_failure"), "destination")
		if len(dest) != 1 || !strings.HasPrefix(dest[0], "aws_sqs_queue.") {
			t.Fatalf("on-failure destination %v, want a queue", dest)
		}
		if q := strings.TrimSuffix(dest[0], ".arn"); !alarmed[q] {
			t.Errorf("no alarm watches the failure destination %s", q)
		}
		dlq := refs(t, child(t, tg, "dead_letter_config"), "arn")
		if len(dlq) != 1 || !alarmed[strings.TrimSuffix(dlq[0], ".arn")] {
			t.Errorf("schedule dead letters %v are not alarmed", dlq)
		}
	}
	// Every keeper job has a heartbeat alarm: its success count, missing
	// data breaching, so a keeper that never runs alarms too.
	jobs, beats := localMap(t, c, "keeper_jobs"), localMap(t, c, "keeper_heartbeat_hours")
	if !slices.Equal(sorted(mapKeys(jobs)), sorted(mapKeys(beats))) {
		t.Errorf("heartbeats for %v, jobs %v", mapKeys(beats), mapKeys(jobs))
	}
	hb := mustBlock(t, c, "resource", "aws_cloudwatch_metric_alarm", "keeper_heartbeat")
	if str(t, hb, "treat_missing_data") != "breaching" || str(t, hb, "metric_name") != metrics.KeeperRuns {
		t.Error("the keeper heartbeat must count KeeperRuns and treat missing data as breaching")
	}
}

// localMap evaluates a constant map in a locals block.
func localMap(t *testing.T, c *config, name string) map[string]cty.Value {
	t.Helper()
	for _, b := range c.blocks {
		if b.Type != "locals" {
			continue
		}
		if a, ok := b.Body.Attributes[name]; ok {
			v, d := a.Expr.Value(nil)
			if d.HasErrors() {
				t.Fatalf("local.%s: %s", name, d.Error())
			}
			return v.AsValueMap()
		}
	}
	t.Fatalf("no local.%s", name)
	return nil
}

func mapKeys(m map[string]cty.Value) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func traversalString(tr hcl.Traversal) string {
	var parts []string
	for _, s := range tr {
		switch s := s.(type) {
		case hcl.TraverseRoot:
			parts = append(parts, s.Name)
		case hcl.TraverseAttr:
			parts = append(parts, s.Name)
		}
	}
	return strings.Join(parts, ".")
}

// TestNoSecretInEnvironment: no function's environment carries a secret —
// a secret's variable holds its Secrets Manager ARN, and the variables
// that would carry one plainly are never set — and the keeper's
// configuration has no RPC URL (paid endpoints put their key in it).
func TestNoSecretInEnvironment(t *testing.T) {
	c := load(t)
	plain := []string{lambdaenv.EnvRPCURL, lambdaenv.EnvListenerFile, lambdaenv.EnvX402FeePayerFile, keeperfn.EnvKeyFile}
	secretRef := regexp.MustCompile(`^aws_secretsmanager_secret\.[a-z0-9_]+\.arn$`)
	for _, fn := range c.all("resource", "aws_lambda_function") {
		obj := childEnv(t, fn)
		for _, it := range obj.Items {
			k, _ := it.KeyExpr.Value(nil)
			name := k.AsString()
			if slices.Contains(plain, name) {
				t.Errorf("%s sets %s: a secret in plain text; give its ARN instead", fn.Labels[1], name)
			}
			var rs []string
			for _, tr := range it.ValueExpr.Variables() {
				rs = append(rs, traversalString(tr))
			}
			if strings.HasSuffix(name, "_ARN") && (len(rs) != 1 || !secretRef.MatchString(rs[0])) {
				t.Errorf("%s: %s = %v, want a Secrets Manager secret's ARN", fn.Labels[1], name, rs)
			}
			for _, r := range rs {
				if strings.HasPrefix(r, "aws_secretsmanager_secret_version.") || strings.HasPrefix(r, "random_password.") ||
					strings.Contains(r, "rpc_url") && !secretRef.MatchString(r) {
					t.Errorf("%s: %s reads %s, a secret's value", fn.Labels[1], name, r)
				}
			}
		}
	}
	kc := mustBlock(t, c, "variable", "keeper_config")
	typ := string(kc.Body.Attributes["type"].Expr.Range().SliceBytes(mustRead(t, "variables.tf")))
	if strings.Contains(typ, "rpc_url") {
		t.Error("keeper_config has rpc_url: the RPC URL belongs in the rpc_url secret")
	}
}

func childEnv(t *testing.T, fn *hclsyntax.Block) *hclsyntax.ObjectConsExpr {
	t.Helper()
	env := child(t, fn, "environment")
	obj, ok := env.Body.Attributes["variables"].Expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		t.Fatalf("%s: environment variables are not an object", fn.Labels[1])
	}
	return obj
}
