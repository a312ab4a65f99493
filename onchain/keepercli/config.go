package keepercli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/gagliardetto/solana-go"
	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/onchain/keeper"
)

// Config is the keeper's configuration file (JSON); keeper.example.json
// names every key.
type Config struct {
	RPCURL         string `json:"rpc_url" validate:"required,httpurl"`
	StakingProgram string `json:"staking_program" validate:"required,pubkey"`
	RewardsProgram string `json:"rewards_program" validate:"required,pubkey"`
	ZeroMint       string `json:"zero_mint" validate:"required,pubkey"`
	USDCMint       string `json:"usdc_mint" validate:"required,pubkey"`
	// Store is the ledger: a file path (the embedded store) or
	// "dynamodb:TABLE" (DynamoDB, at C0MPUTE_DYNAMODB_ENDPOINT or through
	// the usual AWS configuration).
	Store string `json:"store" validate:"required,ledger"`
	// Treasury is the keeper's wallet (the treasury), its public key: all
	// a dry run needs. With Key set too, -execute checks they match.
	Treasury string `json:"treasury" validate:"required_without=Key,omitempty,pubkey"`
	// Key is where the keeper's signing key lives: file:PATH,
	// secretsmanager:SECRET-ID or ssm:PARAMETER-NAME; needed by -execute
	// only. Its wallet is the treasury.
	Key string `json:"key" validate:"omitempty,keyref"`
	// PumpSwapPool is the ZERO/USDC pool the buyback and auto-compound
	// buy on; SlippageBP how far below the quote a buy may fill.
	PumpSwapPool string `json:"pumpswap_pool" validate:"omitempty,pubkey"`
	SlippageBP   uint64 `json:"slippage_bp" validate:"lte=5000"`
	// PriorityFeeCap caps the priority fee, micro-lamports per CU.
	PriorityFeeCap uint64 `json:"priority_fee_cap"`
	// AllowancePool and AllowanceCapBP: SPEC defaults 5,000 credits, 25%.
	AllowancePool  int64 `json:"allowance_pool" validate:"gte=0"`
	AllowanceCapBP int64 `json:"allowance_cap_bp" validate:"gte=0,lte=10000"`
	// FeeSource is the USDC token account the network's share of ZERO
	// trading fees is collected in; inflow records what moves from it
	// into the treasury.
	FeeSource string `json:"fee_source" validate:"omitempty,pubkey"`
	// StakeBoostMin is the matured stake, in ZERO base units, whose
	// payout accounts earn the boosted worker share (SPEC: 500,000 ZERO).
	StakeBoostMin uint64 `json:"stake_boost_min" validate:"gt=0"`
}

// defaults are the values of the optional keys a file leaves out.
func defaults() Config {
	return Config{AllowancePool: 5000, AllowanceCapBP: 2500, PriorityFeeCap: 1_000_000, SlippageBP: 100,
		StakeBoostMin: keeper.DefaultBoostMin}
}

// keyDoc is what a key is and the form it takes: config errors say both.
type keyDoc struct{ what, form string }

var keyDocs = map[string]keyDoc{
	"rpc_url":          {"the Solana JSON-RPC endpoint", "an http(s) URL, e.g. https://api.devnet.solana.com"},
	"staking_program":  {"the zero_staking program id", "a base58 public key"},
	"rewards_program":  {"the zero_rewards program id", "a base58 public key"},
	"zero_mint":        {"the ZERO mint (Token-2022)", "a base58 public key"},
	"usdc_mint":        {"the USDC mint", "a base58 public key"},
	"store":            {"the ledger", "a file path (the embedded store) or dynamodb:TABLE"},
	"treasury":         {"the keeper wallet's public key, all a dry run needs", "a base58 public key"},
	"key":              {"where the signing key is, needed by -execute", "file:PATH, secretsmanager:SECRET-ID or ssm:PARAMETER-NAME"},
	"pumpswap_pool":    {"the ZERO/USDC PumpSwap pool", "a base58 public key"},
	"slippage_bp":      {"how far below its quote a buy may fill", "basis points, 0 to 5000"},
	"priority_fee_cap": {"the most priority fee paid", "micro-lamports per compute unit"},
	"allowance_pool":   {"the day's free-credit allowance", "credits, 0 or more"},
	"allowance_cap_bp": {"the most one staker gets of the allowance pool", "basis points, 0 to 10000"},
	"fee_source":       {"the USDC token account the trading fees are collected in", "a base58 public key"},
	"stake_boost_min":  {"the matured stake that earns the stake boost", "ZERO base units, more than 0 (500000000000 = 500,000 ZERO)"},
}

var validate = func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	// Errors name the JSON key an operator wrote, not the Go field.
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	for tag, ok := range map[string]func(string) bool{
		"pubkey": func(s string) bool { _, err := solana.PublicKeyFromBase58(s); return err == nil },
		"httpurl": func(s string) bool {
			u, err := url.Parse(s)
			return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
		},
		"keyref": func(s string) bool {
			kind, name, _ := strings.Cut(s, ":")
			return name != "" && (kind == "file" || kind == "secretsmanager" || kind == "ssm")
		},
		"ledger": func(s string) bool {
			table, ok := strings.CutPrefix(s, "dynamodb:")
			return !ok || table != ""
		},
	} {
		if err := v.RegisterValidation(tag, func(fl validator.FieldLevel) bool { return ok(fl.Field().String()) }); err != nil {
			panic(err) // a bad tag name: a programming error caught by every test
		}
	}
	return v
}()

// configKeys are the keys a configuration file may set, in file order.
func configKeys() []string {
	t := reflect.TypeFor[Config]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// LoadConfig reads and validates a configuration file. Its errors name
// the file, the JSON key (and for syntax errors the line and column) and
// what the key accepts; a bad "key" is never echoed, in case it is a
// secret pasted in.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("keeper config: %w", err)
	}
	c, err := parseConfig(b)
	if err != nil {
		var lines []error
		for _, line := range strings.Split(err.Error(), "\n") {
			lines = append(lines, fmt.Errorf("%s: %s", path, line))
		}
		return Config{}, errors.Join(lines...)
	}
	return c, nil
}

func parseConfig(b []byte) (Config, error) {
	c := defaults()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, decodeError(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, fmt.Errorf("%s: unexpected data after the JSON object", position(b, dec.InputOffset()-1))
	}
	if err := validate.Struct(c); err != nil {
		var ves validator.ValidationErrors
		if !errors.As(err, &ves) {
			return Config{}, err
		}
		var msgs []string
		for _, fe := range ves {
			msgs = append(msgs, fieldMessage(fe))
		}
		return Config{}, errors.New(strings.Join(msgs, "\n"))
	}
	return c, nil
}

// fieldMessage is one validation failure as an operator reads it.
func fieldMessage(fe validator.FieldError) string {
	key := fe.Field()
	doc := keyDocs[key]
	got := fmt.Sprintf("got %q", fe.Value())
	if key == "key" {
		// Never echo what may be a secret pasted in.
		got = fmt.Sprintf("got a value of %d characters", len(fmt.Sprint(fe.Value())))
	}
	switch fe.Tag() {
	case "required":
		return fmt.Sprintf("%q is missing: %s, %s", key, doc.what, doc.form)
	case "required_without":
		return fmt.Sprintf(`set %q (%s, %s) or "key" (%s: %s), or both`, key, doc.what, doc.form, keyDocs["key"].what, keyDocs["key"].form)
	case "httpurl":
		return fmt.Sprintf("%q: must be an http(s) URL (%s), %s", key, doc.what, got)
	case "pubkey":
		return fmt.Sprintf("%q: must be a base58 public key (%s), %s", key, doc.what, got)
	case "keyref":
		return fmt.Sprintf("%q: must start with file:, secretsmanager: or ssm: and name the key file, secret or parameter, %s", key, got)
	case "ledger":
		return fmt.Sprintf("%q: must be %s, %s", key, doc.form, got)
	case "lte":
		return fmt.Sprintf("%q: must be at most %s (%s), got %v", key, fe.Param(), doc.form, fe.Value())
	case "gte":
		return fmt.Sprintf("%q: must be at least %s (%s), got %v", key, fe.Param(), doc.form, fe.Value())
	case "gt":
		return fmt.Sprintf("%q: must be more than %s (%s), got %v", key, fe.Param(), doc.form, fe.Value())
	}
	return fmt.Sprintf("%q: fails %s: want %s, %s", key, fe.Tag(), doc.what, doc.form)
}

// decodeError turns a JSON decoding error into one that names the key or
// the line and column.
func decodeError(b []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("empty: want a JSON object (see onchain/keepercli/keeper.example.json)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the JSON ends early (an unclosed brace or string?)")
	case errors.As(err, &syn):
		return fmt.Errorf("%s: JSON syntax: %s", position(b, syn.Offset-1), strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Errorf("%s: want a JSON object of keys (see onchain/keepercli/keeper.example.json), got %s", position(b, typ.Offset-1), article(typ.Value))
		}
		// Offset is the end of the value: its line is the key's.
		line, _, _ := strings.Cut(position(b, typ.Offset-1), ",")
		return fmt.Errorf("%s: %q: must be %s, got %s", line, typ.Field, kindOf(typ.Type), article(typ.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		msg := fmt.Sprintf("unknown key %q", name)
		if s := suggest(name, configKeys()); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		keys := configKeys()
		sort.Strings(keys)
		return fmt.Errorf("%s; the keys are %s", msg, strings.Join(keys, ", "))
	}
	return fmt.Errorf("JSON: %w", err)
}

// position is "line L, column C" of the byte at off.
func position(b []byte, off int64) string {
	off = max(0, min(off, int64(len(b))))
	before := b[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

func kindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Uint64, reflect.Uint, reflect.Uint32:
		return "a whole number, 0 or more"
	case reflect.Int64, reflect.Int, reflect.Int32:
		return "a whole number"
	}
	return t.String()
}

// article reads a decoder's value kind ("string", "number -5") as prose.
func article(v string) string {
	switch {
	case v == "object", v == "array":
		return "an " + v
	case strings.HasPrefix(v, "number "):
		return v
	}
	return "a " + v
}

// suggest is the key of keys closest to name, if close enough to be a
// likely typo or abbreviation.
func suggest(name string, keys []string) string {
	best, bestD := "", 1<<30
	for _, k := range keys {
		d := distance(strings.ToLower(name), k)
		if strings.HasPrefix(k, strings.ToLower(name)) || strings.HasPrefix(strings.ToLower(name), k) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if bestD <= max(2, len(name)/3) {
		return best
	}
	return ""
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
