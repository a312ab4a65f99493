package keepercli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestParseArgs: flags come before or after the command, alike; what a
// command does not take, or lacks, is refused with the reason.
func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args string
		want string // options as "command|config|execute|json|at|id|owed|reserve", or "error: …"
	}{
		{"flags first", "-config k.json rewards", "rewards|k.json|false|false||||0"},
		{"flags after the command", "rewards -config k.json -at 2026-12-01", "rewards|k.json|false|false|2026-12-01|||0"},
		{"flags on both sides", "-config k.json rewards -at 2026-12-01 -reserve 100 -json -execute",
			"rewards|k.json|true|true|2026-12-01|||100"},
		{"double dashes", "--config=k.json payouts --id x --owed o.json", "payouts|k.json|false|false||x|o.json|0"},
		{"requested payouts at an hour", "requested-payouts -at 2026-12-01T07:30:00Z -config k.json",
			"requested-payouts|k.json|false|false|2026-12-01T07:30:00Z|||0"},
		{"inflow", "-config k.json inflow -id SIG", "inflow|k.json|false|false||SIG||0"},
		{"no command", "-config k.json", "error: no command: want rewards, allowance, payouts, requested-payouts or inflow"},
		{"two commands", "-config k.json rewards payouts", "error: one command at a time, got rewards payouts"},
		{"unknown command", "-config k.json reward", `error: unknown command "reward": want rewards, allowance, payouts, requested-payouts or inflow`},
		{"no config", "rewards", "error: -config FILE is missing: the keeper's configuration (see onchain/keepercli/keeper.example.json)"},
		{"a flag the command does not take", "-config k.json allowance -reserve 5", "error: -reserve does not apply to allowance (it takes -at)"},
		{"an unknown flag", "-config k.json rewards -dry", "error: flag provided but not defined: -dry"},
		{"a bad number", "-config k.json rewards -reserve x", `error: invalid value "x" for flag -reserve: parse error`},
		{"id without owed", "-config k.json payouts -id x", "error: payouts: -id and -owed go together (without both: the store's earnings)"},
		{"explicit payouts take no day", "-config k.json payouts -id x -owed o.json -at 2026-12-01",
			"error: payouts: -at is for the store's earnings, not with -id and -owed"},
		{"inflow without its transaction", "-config k.json inflow", "error: inflow needs -id SIGNATURE: the transaction that moved the fees into the treasury"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseArgs(strings.Fields(tc.args))
			got := fmt.Sprintf("%s|%s|%v|%v|%s|%s|%s|%d", o.command, o.config, o.execute, o.json, o.at, o.id, o.owed, o.reserve)
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != tc.want {
				t.Errorf("%s:\n got %s\nwant %s", tc.args, got, tc.want)
			}
		})
	}
}

// TestHelp: -h, --help and help print the usage on stdout and exit 0; a
// bad command line exits 2 with the reason on stderr.
func TestHelp(t *testing.T) {
	for _, args := range []string{"-h", "--help", "-help", "help", "rewards -h", "-config k.json help"} {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), strings.Fields(args), &out, &errb, nil); code != 0 || out.String() != usage || errb.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %d bytes, stderr %q", args, code, out.Len(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"rewards"}, &out, &errb, nil); code != 2 || out.Len() != 0 ||
		!strings.Contains(errb.String(), "-config FILE is missing") || !strings.Contains(errb.String(), "-h") {
		t.Errorf("no config: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if !strings.Contains(usage, "c0mpute-keeper -config keeper.json rewards -at 2026-12-01") ||
		!strings.Contains(usage, "c0mpute-keeper rewards -config keeper.json -at 2026-12-01") {
		t.Error("the usage does not show flags on both sides of the command")
	}
}
