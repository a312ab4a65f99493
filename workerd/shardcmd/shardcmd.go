// Package shardcmd is `workerd shard`: the operator and contributor tools
// around sharded rings.
//
//	workerd shard plan   -in pool.json [-out plan.json]
//	workerd shard accept -in pool.json -plan plan.json -probes probes.json [-key worker-key.json]
//	workerd shard verify -plan plan.json -job job.json -receipts receipts.json [-blocks blocks.json]
//	workerd shard sign   -kind capability|rtt|model|params|manifest|job|receipt -in record.json [-key worker-key.json]
//	workerd shard publish -gguf model.gguf -out DIR [-name NAME] [-key worker-key.json]
//
// plan computes the ring for a pool (anyone can: the function is public and
// deterministic); accept is a member's recompute, probe check and signature;
// verify settles a job from its stage receipts; sign signs one record with
// your key (it sets the signer field); publish splits a GGUF model into the
// blobs ring members pull (workerd/shardblob) and signs its manifest and
// model descriptor. JSON formats are documented in functions/shard/README.md.
package shardcmd

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

// Exit codes.
const (
	// ExitOK: a plan was computed, an acceptance signed, a job verified,
	// a model published.
	ExitOK = 0
	// ExitRejected: no ring is possible, the member refuses, or the job's
	// receipts were rejected (the verdict says why).
	ExitRejected = 1
	// ExitUsage: bad flags or unreadable input.
	ExitUsage = 2
)

const usage = `usage:
  workerd shard plan   -in pool.json [-out plan.json]
  workerd shard accept -in pool.json -plan plan.json -probes probes.json [-key worker-key.json] [-abs-us N] [-percent N]
  workerd shard verify -plan plan.json -job job.json -receipts receipts.json [-blocks blocks.json]
                       [-slots-before N] [-slots-after N] [-skew D] [-max-duration D]
  workerd shard sign   -kind capability|rtt|model|params|manifest|job|receipt -in record.json [-key worker-key.json] [-out signed.json]
  workerd shard publish -gguf model.gguf -out DIR [-name NAME] [-key worker-key.json]
"-" reads standard input (for one file) or writes standard output.`

// Env is what Main reads from outside its arguments.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Now is the clock for acceptance times.
	Now func() time.Time
	// Getenv reads the environment; the default identity for accept is
	// $C0MPUTE_WORKER_KEY, else $C0MPUTE_HOME/worker-key.json, as for
	// `workerd run`.
	Getenv func(string) string
}

func (e Env) defaultKeyFile() string {
	if e.Getenv == nil {
		return ""
	}
	if k := e.Getenv(config.EnvKeyFile); k != "" {
		return k
	}
	home := e.Getenv(config.EnvHome)
	if home == "" {
		home = config.DefaultHome()
	}
	return filepath.Join(home, "worker-key.json")
}

// Main runs `workerd shard <args>` and returns the exit code.
func Main(args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, usage)
		return ExitUsage
	}
	var err error
	code := ExitOK
	switch args[0] {
	case "plan":
		code, err = runPlan(args[1:], env)
	case "accept":
		code, err = runAccept(args[1:], env)
	case "verify":
		code, err = runVerify(args[1:], env)
	case "sign":
		code, err = runSign(args[1:], env)
	case "publish":
		code, err = runPublish(args[1:], env)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(env.Stdout, usage)
		return ExitOK
	default:
		err = fmt.Errorf("unknown command %q", args[0])
		code = ExitUsage
	}
	if err != nil {
		fmt.Fprintln(env.Stderr, "workerd shard:", err)
		if code == ExitUsage {
			fmt.Fprintln(env.Stderr, usage)
		}
	}
	return code
}

func newFlags(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("workerd shard "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

// read loads a file, or standard input for "-".
func read(path string, env Env, what string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("-%s is required", what)
	}
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(env.Stdin, shard.MaxInputsBytes+1))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return b, nil
}

// write emits indented JSON to a file, or standard output for "" or "-".
func write(path string, v any, env Env) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "" || path == "-" {
		_, err = env.Stdout.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func runPlan(args []string, env Env) (int, error) {
	fs := newFlags("plan", env)
	in := fs.String("in", "", "pool JSON: model, params, capabilities, rtt (see README)")
	out := fs.String("out", "-", "where to write the plan JSON")
	if err := fs.Parse(args); err != nil {
		return ExitUsage, err
	}
	b, err := read(*in, env, "in")
	if err != nil {
		return ExitUsage, err
	}
	inputs, err := shard.DecodeInputs(b)
	if err != nil {
		return ExitUsage, err
	}
	res, err := shard.NewPlan(inputs)
	if err != nil {
		for _, e := range res.Excluded {
			fmt.Fprintf(env.Stderr, "excluded %s: %s\n", e.Node, e.Reason)
		}
		if errors.Is(err, shard.ErrNoRing) {
			return ExitRejected, err
		}
		return ExitUsage, err
	}
	doc := shard.PlanDoc{Hash: res.Hash, Plan: res.Plan, Excluded: res.Excluded}
	if err := write(*out, doc, env); err != nil {
		return ExitUsage, err
	}
	fmt.Fprintf(env.Stderr, "plan %s: %d stages, %d µs per token predicted (%d compute + %d hops)\n",
		res.Hash, res.Plan.Stages, res.Plan.TokenMicros, res.Plan.ComputeMicros, res.Plan.HopMicros)
	return ExitOK, nil
}

func runAccept(args []string, env Env) (int, error) {
	fs := newFlags("accept", env)
	in := fs.String("in", "", "the pool JSON the plan was computed from")
	planPath := fs.String("plan", "", "the proposed plan JSON")
	probesPath := fs.String("probes", "", `your measured RTTs: {"<base58 node>": <µs>, …}, neighbours and coordinator included`)
	keyPath := fs.String("key", env.defaultKeyFile(), "your identity keypair (Solana keypair file)")
	abs := fs.Int64("abs-us", shard.DefaultTolerance.AbsMicros, "RTT tolerance, absolute µs")
	pct := fs.Int64("percent", shard.DefaultTolerance.Percent, "RTT tolerance, percent of the matrix value")
	if err := fs.Parse(args); err != nil {
		return ExitUsage, err
	}
	if *abs < 0 || *pct < 0 {
		return ExitUsage, errors.New("tolerances cannot be negative")
	}
	b, err := read(*in, env, "in")
	if err != nil {
		return ExitUsage, err
	}
	inputs, err := shard.DecodeInputs(b)
	if err != nil {
		return ExitUsage, err
	}
	if b, err = read(*planPath, env, "plan"); err != nil {
		return ExitUsage, err
	}
	plan, err := shard.DecodePlan(b)
	if err != nil {
		return ExitUsage, err
	}
	if b, err = read(*probesPath, env, "probes"); err != nil {
		return ExitUsage, err
	}
	var probes map[shard.PublicKey]int64
	if err := json.Unmarshal(b, &probes); err != nil {
		return ExitUsage, fmt.Errorf("probes: %w", err)
	}
	if *keyPath == "" {
		return ExitUsage, errors.New("-key is required")
	}
	key, err := identity.Load(*keyPath)
	if err != nil {
		return ExitUsage, err
	}
	acc, err := shard.Accept(key, inputs, plan.Hash(), probes, shard.Tolerance{AbsMicros: *abs, Percent: *pct}, env.Now())
	if err != nil {
		return ExitRejected, err
	}
	return ExitOK, write("-", acc, env)
}

func runVerify(args []string, env Env) (int, error) {
	fs := newFlags("verify", env)
	planPath := fs.String("plan", "", "the plan JSON")
	jobPath := fs.String("job", "", "the coordinator's signed job JSON")
	receiptsPath := fs.String("receipts", "", "JSON array of the stages' signed receipts")
	blocksPath := fs.String("blocks", "", `optional {"<slot>": "<base58 blockhash>", …} every receipt's block must appear in`)
	w := shard.DefaultWindow
	fs.Uint64Var(&w.SlotsBefore, "slots-before", w.SlotsBefore, "slots a receipt's block may precede the job's")
	fs.Uint64Var(&w.SlotsAfter, "slots-after", w.SlotsAfter, "slots a receipt's block may follow the job's")
	fs.DurationVar(&w.Skew, "skew", w.Skew, "how much earlier than the job a receipt may be dated")
	fs.DurationVar(&w.MaxDuration, "max-duration", w.MaxDuration, "how much later than the job a receipt may be dated")
	if err := fs.Parse(args); err != nil {
		return ExitUsage, err
	}
	if w.Skew < 0 || w.MaxDuration < 0 {
		return ExitUsage, errors.New("-skew and -max-duration cannot be negative")
	}
	b, err := read(*planPath, env, "plan")
	if err != nil {
		return ExitUsage, err
	}
	plan, err := shard.DecodePlan(b)
	if err != nil {
		return ExitUsage, err
	}
	if b, err = read(*jobPath, env, "job"); err != nil {
		return ExitUsage, err
	}
	// The job's fields are parsed here; its signature is Verify's to
	// judge, so a forged job is a verdict, not a read error.
	job, err := shard.ParseJob(b)
	if err != nil {
		return ExitUsage, err
	}
	if b, err = read(*receiptsPath, env, "receipts"); err != nil {
		return ExitUsage, err
	}
	receipts, err := shard.DecodeReceipts(b)
	if err != nil {
		return ExitUsage, err
	}
	if *blocksPath != "" {
		if b, err = read(*blocksPath, env, "blocks"); err != nil {
			return ExitUsage, err
		}
		var blocks blockList
		if err := json.Unmarshal(b, &blocks); err != nil {
			return ExitUsage, fmt.Errorf("blocks: %w", err)
		}
		w.Blocks = blocks
	}
	v := shard.Verify(&plan, &job, receipts, w)
	if err := write("-", v, env); err != nil {
		return ExitUsage, err
	}
	if !v.OK {
		return ExitRejected, v.Err()
	}
	return ExitOK, nil
}

// blockList is a slot → blockhash table read from a file.
type blockList map[uint64]shard.Blockhash

func (b blockList) Blockhash(slot uint64) (shard.Blockhash, bool) {
	h, ok := b[slot]
	return h, ok
}

// signer is a record sign can sign: it sets the signer's key and the
// signature, then checks the fields.
type signer interface {
	Sign(ed25519.PrivateKey)
	Check() error
}

func runSign(args []string, env Env) (int, error) {
	fs := newFlags("sign", env)
	kind := fs.String("kind", "", "capability, rtt, model, params, manifest, job or receipt")
	in := fs.String("in", "", "the record's JSON (signer and sig may be left out)")
	out := fs.String("out", "-", "where to write the signed record")
	keyPath := fs.String("key", env.defaultKeyFile(), "the signing keypair (Solana keypair file)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage, err
	}
	var rec signer
	switch *kind {
	case "capability":
		rec = &shard.Capability{}
	case "rtt":
		rec = &shard.RTTRow{}
	case "model":
		rec = &shard.Model{}
	case "params":
		rec = &shard.Params{}
	case "manifest":
		rec = &shard.Manifest{}
	case "job":
		rec = &shard.Job{}
	case "receipt":
		rec = &shard.Receipt{}
	default:
		return ExitUsage, fmt.Errorf("-kind %q is not one of capability, rtt, model, params, manifest, job, receipt", *kind)
	}
	b, err := read(*in, env, "in")
	if err != nil {
		return ExitUsage, err
	}
	if len(b) > shard.MaxInputsBytes {
		return ExitUsage, fmt.Errorf("%s is over %d bytes", *in, shard.MaxInputsBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(rec); err != nil {
		return ExitUsage, fmt.Errorf("%s: %w", *kind, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return ExitUsage, fmt.Errorf("%s: trailing data after the JSON value", *kind)
	}
	if *keyPath == "" {
		return ExitUsage, errors.New("-key is required")
	}
	key, err := identity.Load(*keyPath)
	if err != nil {
		return ExitUsage, err
	}
	rec.Sign(key)
	if err := rec.Check(); err != nil {
		return ExitUsage, err
	}
	return ExitOK, write(*out, rec, env)
}
