package terraform

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// hclEval evaluates expressions the way Terraform does for the functions
// the validation blocks use (OpenTofu's own functions, from the same
// cty and HCL libraries; alltrue is Terraform's, written out below).
type hclEval struct{ vars map[string]cty.Value }

var allTrue = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
	Type:   function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		for it := args[0].ElementIterator(); it.Next(); {
			_, v := it.Element()
			if v.IsNull() || !v.True() {
				return cty.False, nil
			}
		}
		return cty.True, nil
	},
})

func (h hclEval) ctx() *hcl.EvalContext {
	vars := h.vars
	if len(vars) == 0 {
		vars = map[string]cty.Value{"_": cty.NullVal(cty.String)}
	}
	return &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(vars)},
		Functions: map[string]function.Function{
			"can": tryfunc.CanFunc, "regex": stdlib.RegexFunc, "contains": stdlib.ContainsFunc, "length": stdlib.LengthFunc,
			"alltrue": allTrue, "floor": stdlib.FloorFunc, "coalesce": stdlib.CoalesceFunc, "distinct": stdlib.DistinctFunc,
			"max": stdlib.MaxFunc,
		},
	}
}

type variable struct {
	typ      cty.Type
	defaults *typeexpr.Defaults
	def      *cty.Value // nil: required
	checks   []*hclsyntax.Block
}

func variables(t *testing.T, c *config) map[string]variable {
	t.Helper()
	out := map[string]variable{}
	for _, b := range c.blocks {
		if b.Type != "variable" {
			continue
		}
		v := variable{typ: cty.DynamicPseudoType, checks: children(b, "validation")}
		if a, ok := b.Body.Attributes["type"]; ok {
			ty, defs, d := typeexpr.TypeConstraintWithDefaults(a.Expr)
			if d.HasErrors() {
				t.Fatalf("variable %s type: %s", b.Labels[0], d.Error())
			}
			v.typ, v.defaults = ty, defs
		}
		if a, ok := b.Body.Attributes["default"]; ok {
			d, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				t.Fatalf("variable %s default: %s", b.Labels[0], diags.Error())
			}
			v.def = &d
		}
		out[b.Labels[0]] = v
	}
	return out
}

// failures validates inputs as `tofu plan` would and returns, per
// variable, the error messages of the validations that fail.
func failures(t *testing.T, vars map[string]variable, inputs map[string]cty.Value) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, v := range vars {
		raw, ok := inputs[name]
		if !ok {
			if v.def == nil {
				t.Fatalf("required variable %s not given", name)
			}
			raw = *v.def
		}
		if v.defaults != nil {
			raw = v.defaults.Apply(raw)
		}
		val, err := convert.Convert(raw, v.typ)
		if err != nil {
			out[name] = append(out[name], "type: "+err.Error())
			continue
		}
		for _, c := range v.checks {
			ok, d := c.Body.Attributes["condition"].Expr.Value(hclEval{vars: map[string]cty.Value{name: val}}.ctx())
			if d.HasErrors() {
				t.Fatalf("variable %s: condition: %s", name, d.Error())
			}
			if ok.IsNull() || !ok.True() {
				msg, _ := c.Body.Attributes["error_message"].Expr.Value(nil)
				out[name] = append(out[name], msg.AsString())
			}
		}
	}
	return out
}

func exampleInputs(t *testing.T) map[string]cty.Value {
	t.Helper()
	f, d := hclparse.NewParser().ParseHCLFile("terraform.tfvars.example")
	if d.HasErrors() {
		t.Fatal(d.Error())
	}
	attrs, d := f.Body.JustAttributes()
	if d.HasErrors() {
		t.Fatal(d.Error())
	}
	out := map[string]cty.Value{}
	for n, a := range attrs {
		v, d := a.Expr.Value(nil)
		if d.HasErrors() {
			t.Fatalf("%s: %s", n, d.Error())
		}
		out[n] = v
	}
	return out
}

// filled is the example with every REPLACE_WITH_* given a real key.
func filled(t *testing.T) map[string]cty.Value {
	in := exampleInputs(t)
	kc := in["keeper_config"].AsValueMap()
	for k, v := range kc {
		if v.Type() == cty.String && strings.HasPrefix(v.AsString(), "REPLACE_WITH_") {
			kc[k] = cty.StringVal("Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB")
		}
	}
	in["keeper_config"] = cty.ObjectVal(kc)
	return in
}

// TestValidations: the example as shipped is refused before anything is
// applied (its REPLACE_WITH_* placeholders), the example filled in passes,
// and each mistake an operator can make is refused with a message naming
// the variable and what it accepts.
func TestValidations(t *testing.T) {
	c := load(t)
	vars := variables(t, c)
	for name, v := range vars {
		if len(v.checks) == 0 && name != "tags" && name != "keeper_execute" && name != "alarm_models" {
			t.Errorf("variable %s has no validation block", name)
		}
	}
	got := failures(t, vars, exampleInputs(t))
	if len(got) != 1 || len(got["keeper_config"]) != 1 || !strings.Contains(got["keeper_config"][0], "REPLACE_WITH_") {
		t.Fatalf("the example as shipped: %v, want keeper_config refused for its placeholders", got)
	}
	if got := failures(t, vars, filled(t)); len(got) != 0 {
		t.Fatalf("the example filled in: %v", got)
	}
	obj := func(kv map[string]cty.Value) func(cty.Value) cty.Value {
		return func(base cty.Value) cty.Value {
			m := base.AsValueMap()
			for k, v := range kv {
				m[k] = v
			}
			return cty.ObjectVal(m)
		}
	}
	for _, c := range []struct {
		variable string
		value    cty.Value
		patch    func(cty.Value) cty.Value // for keeper_config: applied to the filled one
		want     string
	}{
		{"region", cty.StringVal("Ireland"), nil, "AWS region"},
		{"name", cty.StringVal("C0mpute"), nil, "lower-case"},
		{"log_retention_days", cty.NumberIntVal(10), nil, "CloudWatch Logs accepts"},
		{"rate_per_minute", cty.NumberIntVal(0), nil, "or null"},
		{"worker_share_percent", cty.NumberIntVal(101), nil, "1 to 100"},
		{"api_reserved_concurrency", cty.NumberIntVal(0), nil, "-1 for unreserved"},
		{"relay_reserved_concurrency", cty.NumberIntVal(0), nil, "-1 for unreserved"},
		{"batch_window_ms", cty.NumberIntVal(5000), nil, "0 to 1000"},
		{"cors_origins", cty.ListVal([]cty.Value{cty.StringVal("https://app.example/")}), nil, "no trailing slash"},
		{"signin_domain", cty.StringVal("https://api.example.com"), nil, "no scheme"},
		{"signin_chain", cty.StringVal("solana"), nil, "mainnet, devnet"},
		{"treasury", cty.StringVal("my-wallet"), nil, "base58"},
		{"alarm_topic_arn", cty.StringVal("alarms"), nil, "SNS topic ARN"},
		{"x402_network", cty.StringVal("localnet"), nil, "mainnet, devnet, testnet"},
		{"queue_age_alarm_seconds", cty.NumberIntVal(0), nil, "1 to 600"},
		{"treasury_min_lamports", cty.NumberFloatVal(0.5), nil, "whole lamports"},
		{"catalog", cty.ListVal([]cty.Value{cty.ObjectVal(map[string]cty.Value{"id": cty.StringVal("m"), "price": cty.NumberIntVal(0)})}), nil, "at least 1"},
		{"keeper_config", cty.NilVal, obj(map[string]cty.Value{"slippage_bp": cty.NumberIntVal(9000)}), "0 to 5000"},
		{"keeper_config", cty.NilVal, obj(map[string]cty.Value{"zero_mint": cty.StringVal("0x1234")}), "base58"},
		{"keeper_config", cty.NilVal, obj(map[string]cty.Value{"allowance_pool": cty.NumberIntVal(-5)}), "at least 0"},
	} {
		t.Run(c.variable+"="+strings.ReplaceAll(c.want, " ", "_"), func(t *testing.T) {
			in := filled(t)
			if c.patch != nil {
				in[c.variable] = c.patch(in[c.variable])
			} else {
				in[c.variable] = c.value
			}
			got := failures(t, vars, in)
			if len(got) != 1 || len(got[c.variable]) == 0 || !strings.Contains(strings.Join(got[c.variable], " "), c.want) ||
				!strings.HasPrefix(got[c.variable][0], strings.SplitN(c.variable, ".", 2)[0]) {
				t.Fatalf("failures %v, want %s refused mentioning %q", got, c.variable, c.want)
			}
		})
	}
}
