package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/lambdabuild"
	"github.com/c0mpute/c0mpute/infra/schema"
	"github.com/c0mpute/c0mpute/infra/testenv"
)

// ---- parsing ----

type config struct{ blocks []*hclsyntax.Block }

func load(t *testing.T) *config {
	t.Helper()
	files, err := filepath.Glob("*.tf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no .tf files: %v", err)
	}
	p := hclparse.NewParser()
	c := &config{}
	for _, f := range files {
		file, diags := p.ParseHCLFile(f)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", f, diags.Error())
		}
		c.blocks = append(c.blocks, file.Body.(*hclsyntax.Body).Blocks...)
	}
	return c
}

// block finds the top-level block of type typ with these labels.
func (c *config) block(typ string, labels ...string) *hclsyntax.Block {
	for _, b := range c.blocks {
		if b.Type == typ && slices.Equal(b.Labels, labels) {
			return b
		}
	}
	return nil
}

func (c *config) all(typ, kind string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range c.blocks {
		if b.Type == typ && len(b.Labels) > 0 && b.Labels[0] == kind {
			out = append(out, b)
		}
	}
	return out
}

func mustBlock(t *testing.T, c *config, typ string, labels ...string) *hclsyntax.Block {
	t.Helper()
	b := c.block(typ, labels...)
	if b == nil {
		t.Fatalf("no %s %q", typ, strings.Join(labels, "."))
	}
	return b
}

func children(b *hclsyntax.Block, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, c := range b.Body.Blocks {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

func child(t *testing.T, b *hclsyntax.Block, typ string) *hclsyntax.Block {
	t.Helper()
	cs := children(b, typ)
	if len(cs) != 1 {
		t.Fatalf("%s %v: %d %s blocks, want 1", b.Type, b.Labels, len(cs), typ)
	}
	return cs[0]
}

// literal evaluates an attribute that must be a constant.
func literal(t *testing.T, b *hclsyntax.Block, name string) cty.Value {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		t.Fatalf("%s %v: no attribute %s", b.Type, b.Labels, name)
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		t.Fatalf("%s %v: %s is not a constant: %s", b.Type, b.Labels, name, diags.Error())
	}
	return v
}

func str(t *testing.T, b *hclsyntax.Block, name string) string {
	t.Helper()
	v := literal(t, b, name)
	if v.Type() != cty.String {
		t.Fatalf("%s %v: %s is %s, want a string", b.Type, b.Labels, name, v.Type().FriendlyName())
	}
	return v.AsString()
}

func strs(t *testing.T, b *hclsyntax.Block, name string) []string {
	t.Helper()
	v := literal(t, b, name)
	if !v.CanIterateElements() {
		t.Fatalf("%s %v: %s is not a list", b.Type, b.Labels, name)
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.Type() != cty.String {
			t.Fatalf("%s %v: %s has a non-string element", b.Type, b.Labels, name)
		}
		out = append(out, e.AsString())
	}
	return out
}

// refs lists the references an attribute's expression makes, as
// "aws_dynamodb_table.main.arn", "local.index_arn", "var.stage".
func refs(t *testing.T, b *hclsyntax.Block, name string) []string {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		t.Fatalf("%s %v: no attribute %s", b.Type, b.Labels, name)
	}
	var out []string
	for _, tr := range a.Expr.Variables() {
		var parts []string
		for _, s := range tr {
			switch s := s.(type) {
			case hcl.TraverseRoot:
				parts = append(parts, s.Name)
			case hcl.TraverseAttr:
				parts = append(parts, s.Name)
			}
		}
		out = append(out, strings.Join(parts, "."))
	}
	return out
}

// objectKeys returns the keys of an object constructor attribute.
func objectKeys(t *testing.T, b *hclsyntax.Block, name string) []string {
	t.Helper()
	a, ok := b.Body.Attributes[name]
	if !ok {
		t.Fatalf("%s %v: no attribute %s", b.Type, b.Labels, name)
	}
	pairs, diags := hcl.ExprMap(a.Expr)
	if diags.HasErrors() {
		t.Fatalf("%s %v: %s is not an object: %s", b.Type, b.Labels, name, diags.Error())
	}
	var keys []string
	for _, p := range pairs {
		k := hcl.ExprAsKeyword(p.Key)
		if k == "" {
			v, d := p.Key.Value(nil)
			if d.HasErrors() || v.Type() != cty.String {
				t.Fatalf("%s %v: %s has a computed key", b.Type, b.Labels, name)
			}
			k = v.AsString()
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

// ---- the checks ----

// TestFunctions: every folder under functions/cmd has its Lambda function,
// log group and role, built as scripts/build-lambdas builds it; nothing
// else is deployed as a function.
func TestFunctions(t *testing.T) {
	c := load(t)
	names, err := lambdabuild.Functions("..")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, b := range c.all("resource", "aws_lambda_function") {
		declared = append(declared, b.Labels[1])
	}
	if !slices.Equal(sorted(declared), names) {
		t.Fatalf("aws_lambda_function resources %v, want one per functions/cmd folder %v", sorted(declared), names)
	}
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			fn := mustBlock(t, c, "resource", "aws_lambda_function", n)
			if got := str(t, fn, "handler"); got != "bootstrap" {
				t.Errorf("handler %q, want bootstrap", got)
			}
			if got := str(t, fn, "runtime"); got != "provided.al2023" {
				t.Errorf("runtime %q, want provided.al2023", got)
			}
			if got := strs(t, fn, "architectures"); !slices.Equal(got, []string{"arm64"}) {
				t.Errorf("architectures %v, want [arm64]", got)
			}
			if got := refs(t, fn, "filename"); !slices.Equal(got, []string{"local.zip." + n}) {
				t.Errorf("filename refers to %v, want local.zip.%s", got, n)
			}
			if got := refs(t, fn, "source_code_hash"); !slices.Equal(got, []string{"local.zip." + n}) {
				t.Errorf("source_code_hash refers to %v, want local.zip.%s", got, n)
			}
			if got := refs(t, fn, "role"); !slices.Equal(got, []string{"aws_iam_role." + n + ".arn"}) {
				t.Errorf("role %v, want its own aws_iam_role.%s", got, n)
			}
			lc := child(t, fn, "logging_config")
			if got := refs(t, lc, "log_group"); !slices.Equal(got, []string{"aws_cloudwatch_log_group." + n + ".name"}) {
				t.Errorf("log group %v, want aws_cloudwatch_log_group.%s", got, n)
			}
			if str(t, lc, "log_format") != "JSON" {
				t.Error("log_format is not JSON")
			}
			lg := mustBlock(t, c, "resource", "aws_cloudwatch_log_group", n)
			if got := refs(t, lg, "retention_in_days"); !slices.Equal(got, []string{"var.log_retention_days"}) {
				t.Errorf("log retention %v", got)
			}
			for _, a := range []string{"memory_size", "timeout", "reserved_concurrent_executions"} {
				if _, ok := fn.Body.Attributes[a]; !ok {
					t.Errorf("no %s", a)
				}
			}
		})
	}
	api := mustBlock(t, c, "resource", "aws_lambda_function", "api")
	job := api.Body.Attributes["timeout"]
	v, _ := job.Expr.Value(nil)
	secs, _ := v.AsBigFloat().Int64()
	if d := time.Duration(secs) * time.Second; d <= apiJobLimit() {
		t.Errorf("api timeout %v must outlive a job (%v), or Lambda cuts streams off with credits held", d, apiJobLimit())
	}
	if secs > 900 {
		t.Errorf("api timeout %d s: Lambda's maximum is 900", secs)
	}
	keeper := mustBlock(t, c, "resource", "aws_lambda_function", "keeper")
	if v := literal(t, keeper, "reserved_concurrent_executions"); !v.Equals(cty.NumberIntVal(1)).True() {
		t.Error("keeper reserved concurrency must be 1: two runs at once would race on the ledger")
	}
}

func apiJobLimit() time.Duration { return api.DefaultLimits().Job }

// TestFunctionURLStreams: the API is reachable only through a Function URL
// in streaming mode, which lambdaurl.Start answers in.
func TestFunctionURLStreams(t *testing.T) {
	c := load(t)
	u := mustBlock(t, c, "resource", "aws_lambda_function_url", "api")
	if got := str(t, u, "invoke_mode"); got != "RESPONSE_STREAM" {
		t.Errorf("invoke_mode %q, want RESPONSE_STREAM", got)
	}
	if got := refs(t, u, "function_name"); !slices.Equal(got, []string{"aws_lambda_function.api.function_name"}) {
		t.Errorf("function url for %v", got)
	}
	for _, o := range []string{"api_url", "relay_url"} {
		mustBlock(t, c, "output", o)
	}
	// A public URL needs InvokeFunctionUrl (auth NONE) and, since October
	// 2025, InvokeFunction restricted to Function URL calls.
	var urlPerm, invokePerm bool
	for _, p := range c.all("resource", "aws_lambda_permission") {
		if !slices.Equal(refs(t, p, "function_name"), []string{"aws_lambda_function.api.function_name"}) {
			continue
		}
		switch str(t, p, "action") {
		case "lambda:InvokeFunctionUrl":
			urlPerm = str(t, p, "function_url_auth_type") == "NONE"
		case "lambda:InvokeFunction":
			invokePerm = literal(t, p, "invoked_via_function_url").True()
		}
	}
	if !urlPerm || !invokePerm {
		t.Errorf("api permissions: InvokeFunctionUrl %v, InvokeFunction via URL %v; want both", urlPerm, invokePerm)
	}
}

// TestWebSocketRoutes: the three routes the relay function handles, all to
// its integration, and a throttled stage.
func TestWebSocketRoutes(t *testing.T) {
	c := load(t)
	a := mustBlock(t, c, "resource", "aws_apigatewayv2_api", "relay")
	if str(t, a, "protocol_type") != "WEBSOCKET" {
		t.Error("relay API is not a WebSocket API")
	}
	in := mustBlock(t, c, "resource", "aws_apigatewayv2_integration", "relay")
	if str(t, in, "integration_type") != "AWS_PROXY" || !slices.Equal(refs(t, in, "integration_uri"), []string{"aws_lambda_function.relay.invoke_arn"}) {
		t.Error("integration is not a Lambda proxy to the relay function")
	}
	var keys []string
	for _, r := range c.all("resource", "aws_apigatewayv2_route") {
		keys = append(keys, str(t, r, "route_key"))
		if got := refs(t, r, "target"); !slices.Equal(got, []string{"aws_apigatewayv2_integration.relay.id"}) {
			t.Errorf("route %s targets %v", r.Labels[1], got)
		}
	}
	if want := []string{"$connect", "$default", "$disconnect"}; !slices.Equal(sorted(keys), want) {
		t.Errorf("routes %v, want %v", sorted(keys), want)
	}
	st := child(t, mustBlock(t, c, "resource", "aws_apigatewayv2_stage", "relay"), "default_route_settings")
	for _, a := range []string{"throttling_rate_limit", "throttling_burst_limit"} {
		if _, ok := st.Body.Attributes[a]; !ok {
			t.Errorf("stage has no %s", a)
		}
	}
}

// TestTableMatchesSchema compares the table with infra/schema.
func TestTableMatchesSchema(t *testing.T) {
	c := load(t)
	tb := mustBlock(t, c, "resource", "aws_dynamodb_table", "main")
	want := schema.CreateTableInput("x")
	for _, k := range want.KeySchema {
		attr := map[string]string{"HASH": "hash_key", "RANGE": "range_key"}[string(k.KeyType)]
		if got := str(t, tb, attr); got != aws.ToString(k.AttributeName) {
			t.Errorf("%s %q, schema says %q", attr, got, aws.ToString(k.AttributeName))
		}
	}
	got := map[string]string{}
	for _, a := range children(tb, "attribute") {
		got[str(t, a, "name")] = str(t, a, "type")
	}
	wantAttrs := map[string]string{}
	for _, a := range want.AttributeDefinitions {
		wantAttrs[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	if !reflect.DeepEqual(got, wantAttrs) {
		t.Errorf("attributes %v, schema says %v", got, wantAttrs)
	}
	gsis := children(tb, "global_secondary_index")
	if len(gsis) != len(want.GlobalSecondaryIndexes) {
		t.Fatalf("%d indexes, schema has %d", len(gsis), len(want.GlobalSecondaryIndexes))
	}
	for i, wi := range want.GlobalSecondaryIndexes {
		g := gsis[i]
		if str(t, g, "name") != aws.ToString(wi.IndexName) {
			t.Errorf("index %q, schema says %q", str(t, g, "name"), aws.ToString(wi.IndexName))
		}
		if str(t, g, "hash_key") != aws.ToString(wi.KeySchema[0].AttributeName) || str(t, g, "range_key") != aws.ToString(wi.KeySchema[1].AttributeName) {
			t.Errorf("index keys differ from the schema")
		}
		if str(t, g, "projection_type") != string(wi.Projection.ProjectionType) {
			t.Errorf("index projection %q, schema says %q", str(t, g, "projection_type"), wi.Projection.ProjectionType)
		}
	}
	if str(t, tb, "billing_mode") != string(want.BillingMode) {
		t.Errorf("billing mode %q, schema says %q", str(t, tb, "billing_mode"), want.BillingMode)
	}
	ttl := child(t, tb, "ttl")
	if str(t, ttl, "attribute_name") != schema.TTL || literal(t, ttl, "enabled").False() {
		t.Errorf("ttl must be enabled on %q", schema.TTL)
	}
	if literal(t, child(t, tb, "point_in_time_recovery"), "enabled").False() {
		t.Error("point-in-time recovery is off")
	}
	if literal(t, child(t, tb, "server_side_encryption"), "enabled").False() {
		t.Error("server-side encryption is off")
	}
}

// ---- environment ----

// recordingEnv answers every variable with a valid value and records which
// were asked: what a loader reads is what the code reads.
type recordingEnv struct {
	asked  map[string]bool
	values map[string]string
}

func (r *recordingEnv) get(k string) string {
	r.asked[k] = true
	return r.values[k]
}

func (r *recordingEnv) names() []string {
	var out []string
	for k := range r.asked {
		out = append(out, k)
	}
	return sorted(out)
}

type fakeSecrets struct{}

// GetSecretValue stands in for Secrets Manager, which cannot run here.
func (fakeSecrets) GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(strings.Repeat("s", 64))}, nil
}

// testOnly are variables the code reads that Terraform must not set:
// DynamoDB Local's endpoint, secrets from files or given plainly (the RPC
// URL, which as deployed comes from its secret), and the keeper's
// persistent ledger (EFS, not provisioned yet; see keeperfn).
var testOnly = []string{lambdaenv.EnvDynamoEndpoint, lambdaenv.EnvListenerFile, lambdaenv.EnvX402FeePayerFile, keeperfn.EnvKeyFile, keeperfn.EnvLedger,
	lambdaenv.EnvRPCURL}

func readsOf(t *testing.T, fn string) []string {
	t.Helper()
	ctx := context.Background()
	r := &recordingEnv{asked: map[string]bool{}, values: map[string]string{
		lambdaenv.EnvTable: "t", lambdaenv.EnvConnectionsURL: "https://a.execute-api.eu-west-1.amazonaws.com/prod",
		lambdaenv.EnvRelayURL: "wss://a.execute-api.eu-west-1.amazonaws.com/prod", lambdaenv.EnvListenerSecret: "arn",
		keeperfn.EnvConfig: `{}`, keeperfn.EnvKeyARN: "arn",
		// Top-ups on, so that the loader reads their fee payer's secret.
		lambdaenv.EnvX402Network: "devnet", lambdaenv.EnvX402FeePayer: "arn", lambdaenv.EnvRPCURL: "https://rpc.example",
		lambdaenv.EnvUSDCMint: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", lambdaenv.EnvTreasury: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
	}}
	var err error
	switch fn {
	case "api":
		_, err = lambdaenv.LoadAPI(ctx, r.get, fakeSecrets{})
	case "relay":
		_, err = lambdaenv.LoadRelay(ctx, r.get, fakeSecrets{})
	case "keeper":
		_, err = keeperfn.Load(ctx, r.get, fakeSecrets{})
	default:
		t.Fatalf("function %q: add how its configuration is loaded to readsOf", fn)
	}
	if err != nil {
		t.Fatalf("%s: load: %v", fn, err)
	}
	// The metrics' namespace is read where the main builds its emitter.
	main, err := os.ReadFile(filepath.Join("..", "functions", "cmd", fn, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(main, []byte("metrics.FromEnv(")) {
		r.asked[metrics.EnvNamespace] = true
	}
	return r.names()
}

// TestEnvironment: each function gets exactly the variables its loader
// reads (minus the test-only ones), and never a test-only one.
func TestEnvironment(t *testing.T) {
	c := load(t)
	names, _ := lambdabuild.Functions("..")
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			var want []string
			for _, v := range readsOf(t, n) {
				if !slices.Contains(testOnly, v) {
					want = append(want, v)
				}
			}
			fn := mustBlock(t, c, "resource", "aws_lambda_function", n)
			got := objectKeys(t, child(t, fn, "environment"), "variables")
			if !slices.Equal(got, want) {
				t.Errorf("environment %v, the code reads %v", got, want)
			}
		})
	}
}

// ---- IAM ----

// actions maps each AWS call the functions' interfaces declare to the IAM
// actions that authorise it. A method added to one of the interfaces
// fails TestIAMCoversInterfaces until it is mapped here, and TestIAM until
// the roles allow it.
var actions = map[string][]string{
	"dynamodb.GetItem":      {"dynamodb:GetItem"},
	"dynamodb.PutItem":      {"dynamodb:PutItem"},
	"dynamodb.UpdateItem":   {"dynamodb:UpdateItem"},
	"dynamodb.DeleteItem":   {"dynamodb:DeleteItem"},
	"dynamodb.Query":        {"dynamodb:Query"},
	"dynamodb.Scan":         {"dynamodb:Scan"},
	"dynamodb.BatchGetItem": {"dynamodb:BatchGetItem"},
	// TransactWriteItems has no action of its own: each item is
	// authorised as the write it makes.
	"dynamodb.TransactWriteItems":                {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"},
	"apigatewaymanagementapi.PostToConnection":   {"execute-api:ManageConnections"},
	"apigatewaymanagementapi.DeleteConnection":   {"execute-api:ManageConnections"},
	"secretsmanager.GetSecretValue":              {"secretsmanager:GetSecretValue"},
	"cloudwatchlogs.PutLogEvents (Lambda agent)": {"logs:CreateLogStream", "logs:PutLogEvents"},
	failureDestination:                           {"sqs:SendMessage"},
}

const logs = "cloudwatchlogs.PutLogEvents (Lambda agent)"

// failureDestination is Lambda delivering a keeper run that failed every
// retry to its on-failure queue, with the function's role.
const failureDestination = "sqs.SendMessage (Lambda on-failure destination)"

func methods[T any](service string) []string {
	it := reflect.TypeFor[T]()
	var out []string
	for i := range it.NumMethod() {
		out = append(out, service+"."+it.Method(i).Name)
	}
	return out
}

// calls is what each function's code calls, from the interfaces it is
// built on. Only ResetConnections scans (functions/store/dynamo), and only
// the dev runner calls it: no function's store scans. Stats reads the
// counters with BatchGetItem, for the API's /v1/stats and both functions'
// gauges. The keeper reads its key
// with keepercli.AWSSecrets from Secrets Manager (Terraform uses no ssm:
// reference).
func calls() map[string][]string {
	store := methods[dynamo.Client]("dynamodb")
	conns := methods[connections.API]("apigatewaymanagementapi")
	secrets := methods[lambdaenv.SecretsClient]("secretsmanager")
	var noScan []string
	for _, m := range store {
		if m != "dynamodb.Scan" {
			noScan = append(noScan, m)
		}
	}
	ledger := noScan // the ledger (functions/store/dynamo/ledger.go) never scans
	return map[string][]string{
		"api":    slices.Concat(noScan, conns, secrets, []string{logs}),
		"relay":  slices.Concat(noScan, conns, secrets, []string{logs}),
		"keeper": slices.Concat(ledger, []string{"secretsmanager.GetSecretValue", logs, failureDestination}),
	}
}

func TestIAMCoversInterfaces(t *testing.T) {
	for fn, cs := range calls() {
		for _, c := range cs {
			if _, ok := actions[c]; !ok {
				t.Errorf("%s calls %s, which has no IAM mapping in actions", fn, c)
			}
		}
	}
}

// TestIAM: each function's role allows exactly the actions its calls need
// — nothing more — on named resources, never "*".
func TestIAM(t *testing.T) {
	c := load(t)
	for fn, cs := range calls() {
		t.Run(fn, func(t *testing.T) {
			var want []string
			for _, call := range cs {
				want = append(want, actions[call]...)
			}
			want = sorted(want)
			doc := mustBlock(t, c, "data", "aws_iam_policy_document", fn)
			var got []string
			for _, st := range children(doc, "statement") {
				if _, ok := st.Body.Attributes["effect"]; ok && str(t, st, "effect") != "Allow" {
					continue
				}
				as := strs(t, st, "actions")
				for _, a := range as {
					if strings.Contains(a, "*") {
						t.Errorf("statement %s: wildcard action %q", str(t, st, "sid"), a)
					}
				}
				got = append(got, as...)
				checkResources(t, st, as)
			}
			if got = sorted(got); !slices.Equal(got, want) {
				t.Errorf("role allows %v\n  code calls need %v", got, want)
			}
			pol := mustBlock(t, c, "resource", "aws_iam_role_policy", fn)
			if r := refs(t, pol, "role"); !slices.Equal(r, []string{"aws_iam_role." + fn + ".id"}) {
				t.Errorf("policy attached to %v", r)
			}
			if r := refs(t, pol, "policy"); !slices.Equal(r, []string{"data.aws_iam_policy_document." + fn + ".json"}) {
				t.Errorf("policy is %v", r)
			}
		})
	}
}

// checkResources: no "*" resource; Scan only on the index.
func checkResources(t *testing.T, st *hclsyntax.Block, as []string) {
	t.Helper()
	a, ok := st.Body.Attributes["resources"]
	if !ok {
		t.Errorf("statement %v: no resources", as)
		return
	}
	if v, d := a.Expr.Value(nil); !d.HasErrors() {
		t.Errorf("statement %v: constant resources %#v, want references to the deployed resources", as, v)
		return
	}
	if tup, ok := a.Expr.(*hclsyntax.TupleConsExpr); ok {
		for _, e := range tup.Exprs {
			if v, d := e.Value(nil); !d.HasErrors() && v.Type() == cty.String && strings.TrimSpace(v.AsString()) == "*" {
				t.Errorf("statement %v: resource \"*\"", as)
			}
		}
	}
	if slices.Contains(as, "dynamodb:Scan") {
		if r := refs(t, st, "resources"); !slices.Equal(r, []string{"local.index_arn"}) || len(as) != 1 {
			t.Errorf("Scan must be alone in its statement and on the index only (got %v on %v)", as, r)
		}
	}
}

// TestSchedules: one schedule per keeper job, in UTC, invoking the keeper
// with the job's name; the jobs are the ones keeperfn accepts.
func TestSchedules(t *testing.T) {
	c := load(t)
	var jobs map[string]string
	for _, b := range c.blocks {
		if b.Type != "locals" {
			continue
		}
		if a, ok := b.Body.Attributes["keeper_jobs"]; ok {
			v, d := a.Expr.Value(nil)
			if d.HasErrors() {
				t.Fatalf("keeper_jobs: %s", d.Error())
			}
			jobs = map[string]string{}
			for k, e := range v.AsValueMap() {
				jobs[k] = e.AsString()
			}
		}
	}
	want := map[string]string{
		keeperfn.JobAllowance:        "cron(0 0 * * ? *)",
		keeperfn.JobRewards:          "cron(0 15 * * ? *)",
		keeperfn.JobRequestedPayouts: "cron(30 * * * ? *)",
	}
	for j, cron := range want {
		if jobs[j] != cron {
			t.Errorf("%s schedule %q, want %q", j, jobs[j], cron)
		}
	}
	if _, ok := jobs[keeperfn.JobPayouts]; !ok {
		t.Error("no payouts schedule")
	}
	s := mustBlock(t, c, "resource", "aws_scheduler_schedule", "keeper")
	if str(t, s, "schedule_expression_timezone") != "UTC" {
		t.Error("schedules are not in UTC")
	}
	tg := child(t, s, "target")
	if r := refs(t, tg, "arn"); !slices.Equal(r, []string{"aws_lambda_function.keeper.arn"}) {
		t.Errorf("schedule target %v", r)
	}
	// Scheduled runs ask to execute (a manual invoke is a dry run), and
	// their input is an event keeperfn decodes, unknown fields refused.
	input, ok := tg.Body.Attributes["input"].Expr.(*hclsyntax.FunctionCallExpr)
	if !ok || input.Name != "jsonencode" || len(input.Args) != 1 {
		t.Fatal("schedule input is not jsonencode({...})")
	}
	obj, ok := input.Args[0].(*hclsyntax.ObjectConsExpr)
	if !ok {
		t.Fatal("schedule input is not an object")
	}
	ev := map[string]any{}
	for _, it := range obj.Items {
		k, _ := it.KeyExpr.Value(nil)
		v, d := it.ValueExpr.Value(nil)
		if d.HasErrors() {
			v = cty.StringVal("each.key") // the job's name
		}
		switch v.Type() {
		case cty.Bool:
			ev[k.AsString()] = v.True()
		default:
			ev[k.AsString()] = "2026-11-29T00:00:00Z"
		}
	}
	ev["job"] = keeperfn.JobRewards
	b, _ := json.Marshal(ev)
	var e keeperfn.Event
	if err := json.Unmarshal(b, &e); err != nil || !e.Execute {
		t.Errorf("schedule input %s: %v (execute %v), want an event asking to execute", b, err, e.Execute)
	}
}

// TestHCLFormat checks every .tf file is in the canonical layout of
// hclwrite.Format, the formatter that `tofu fmt` and `terraform fmt` are
// built on: it runs everywhere, also where OpenTofu is not installed.
func TestHCLFormat(t *testing.T) {
	files, err := filepath.Glob("*.tf")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := hclwrite.Format(src); !bytes.Equal(got, src) {
			t.Errorf("%s is not formatted (run tofu fmt); formatted it reads:\n%s", f, got)
		}
	}
}

// TestFmt runs `tofu fmt -check` over this folder.
func TestFmt(t *testing.T) {
	bin, why := tofu()
	if bin == "" {
		testenv.Missing(t, "OpenTofu", why)
	}
	out, err := exec.Command(bin, "fmt", "-check", "-recursive", "-diff", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("tofu fmt -check: %v\n%s", err, out)
	}
}

// tofu finds OpenTofu: $C0MPUTE_TOFU, else .cache/bin/tofu (scripts/test
// builds it there).
func tofu() (string, string) {
	if p := os.Getenv("C0MPUTE_TOFU"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "C0MPUTE_TOFU: " + err.Error()
		}
		return p, ""
	}
	p, _ := filepath.Abs("../.cache/bin/tofu")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", "no " + p + " and C0MPUTE_TOFU unset"
		}
		return "", err.Error()
	}
	return p, ""
}

// TestCORSIsTheAPIs: the Function URL has no CORS configuration of its own,
// which would answer every origin's preflight and override the API's
// headers: CORS follows cors_origins, through the API (off by default).
func TestCORSIsTheAPIs(t *testing.T) {
	c := load(t)
	url := mustBlock(t, c, "resource", "aws_lambda_function_url", "api")
	if cs := children(url, "cors"); len(cs) != 0 {
		t.Errorf("the API's Function URL has a cors block: CORS belongs to the API (C0MPUTE_CORS_ORIGINS)")
	}
	fn := mustBlock(t, c, "resource", "aws_lambda_function", "api")
	if !slices.Contains(objectKeys(t, child(t, fn, "environment"), "variables"), lambdaenv.EnvCORSOrigins) {
		t.Errorf("the API function does not get %s", lambdaenv.EnvCORSOrigins)
	}
}
