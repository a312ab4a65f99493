// Command c0mpute-dev runs a whole c0mpute network on one machine: the
// gateway API, the relay, the embedded store (or DynamoDB, with
// C0MPUTE_STORE=dynamodb) and a workerd in front of the
// local Ollama. scripts/dev builds and starts it; see the README.
//
// It is idempotent: state lives in $C0MPUTE_HOME (default .c0mpute/ in the
// repository), so a second start reuses the dev account, its API key, the
// worker token and the worker identity.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/canary"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/cors"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/schema"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/config"
)

const devAccount = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "c0mpute-dev:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() error {
	workerdBin := flag.String("workerd", "", "workerd binary to start (none: gateway only)")
	chainDir := flag.String("chain-dir", filepath.Join("onchain", "svmtest"), "the local chain's server (with "+envChain+"=local)")
	flag.Parse()
	home := env("C0MPUTE_HOME", ".c0mpute")
	apiAddr := env("C0MPUTE_API_ADDR", "127.0.0.1:8080")
	relayAddr := env("C0MPUTE_RELAY_ADDR", "127.0.0.1:8081")
	mgmtAddr := env(envManagementAddr, devnet.DefaultManagementAddr)
	ollamaURL := config.OllamaURL(os.Getenv("OLLAMA_HOST"))
	credits, err := strconv.ParseInt(env("C0MPUTE_DEV_CREDITS", "100000"), 10, 64)
	if err != nil || credits < 0 {
		return fmt.Errorf("C0MPUTE_DEV_CREDITS must be a non-negative integer of credits (1 credit = $0.01)")
	}
	limits, err := limitsFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	canaries, err := canariesFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	origins, err := cors.ParseOrigins(os.Getenv("C0MPUTE_CORS_ORIGINS"))
	if err != nil {
		return fmt.Errorf("C0MPUTE_CORS_ORIGINS: %w", err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	st, where, err := openStore(ctx, home)
	if err != nil {
		return err
	}
	defer st.Close()

	ollamaModels, ollamaErr := listOllama(ctx, ollamaURL)
	cat, err := catalog.FromSource(os.Getenv("C0MPUTE_CATALOG"))
	if err != nil {
		return fmt.Errorf("C0MPUTE_CATALOG: %w", err)
	}
	models := cat.Models()
	var chain *localChain
	var deposits *api.Deposits
	var topUps *api.TopUps
	switch v := os.Getenv(envChain); v {
	case "":
	case "local":
		if chain, err = startChain(ctx, *chainDir, home, env(envChainAddr, "127.0.0.1:8899")); err != nil {
			return err
		}
		defer chain.Close()
		if deposits, topUps, err = chain.payments(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s=%q: want local, or unset for no chain", envChain, v)
	}
	ring, err := publishRing(ctx, home, devPrice(cat), log)
	if err != nil {
		return err
	}
	if ring != nil {
		defer ring.Close()
		models = append(models, ring.model)
	}
	stack, err := devnet.Start(ctx, devnet.Config{Store: st, APIAddr: apiAddr, RelayAddr: relayAddr, ManagementAddr: mgmtAddr,
		Models: models, Limits: limits, BatchWindow: devnet.DevBatchWindow, Log: log, Canaries: canaries, CORSOrigins: origins,
		Deposits: deposits, TopUps: topUps})
	if err != nil {
		return err
	}
	defer stack.Close()
	offerOllama(stack.Catalog, ollamaModels, log)

	apiKey, token, err := devCredentials(ctx, stack, home, credits)
	if err != nil {
		return err
	}
	// Workers: one in front of Ollama (it connects as soon as Ollama is
	// up), and one on the built-in engine when a GGUF file is named, or,
	// with no Ollama reachable, on a generated demo model, so that the
	// network always serves something.
	gguf, err := builtinModel(stack.Catalog, home, ollamaErr != nil)
	if err != nil {
		return err
	}
	envFile := filepath.Join(home, "dev.env")
	lines := fmt.Sprintf("OPENAI_BASE_URL=%s\nOPENAI_API_KEY=%s\n", stack.APIURL, apiKey)
	if ring != nil {
		// Ring members are started by hand: they need the relay and a
		// worker token of the dev account.
		lines += fmt.Sprintf("%s=%s\n%s=%s\n", config.EnvRelayURL, stack.RelayURL, config.EnvToken, token)
	}
	if m := servedModel(ollamaModels, gguf); m != "" {
		// A model this network serves right now, for examples to name.
		lines += fmt.Sprintf("C0MPUTE_MODEL=%s\n", m)
	}
	chainLine := ""
	if chain != nil {
		lines += chain.envLines()
		chainLine = fmt.Sprintf("  chain   %s (local Solana JSON-RPC: test USDC %s, treasury %s;\n          dev wallet %s with 100 SOL and 1,000 test USDC, key in %s)\n",
			chain.URL, chain.Mint, chain.Treasury, chain.DevWallet, chain.DevWalletKey)
		ledger, err := keeperStore(home)
		if err != nil {
			return err
		}
		keeperCfg, err := chain.writeKeeperConfig(home, ledger)
		if err != nil {
			return err
		}
		note := ""
		if !strings.HasPrefix(ledger, "dynamodb:") {
			// bolt locks its file: the keeper cannot open the store
			// while this process holds it, and the chain stops with it.
			note = "\n          the embedded store is one process's at a time: to run the keeper beside the network,\n" +
				"          start it with C0MPUTE_STORE=dynamodb (scripts/dynamodb-local runs DynamoDB Local)"
		}
		chainLine += fmt.Sprintf("  keeper  %s (this chain and this store); a dry run, from the repository:\n          %s%s\n",
			keeperCfg, keeperCommand(keeperCfg, ledger), note)
	}
	if err := os.WriteFile(envFile, []byte(lines), 0o600); err != nil {
		return err
	}
	fmt.Printf("\nc0mpute network running\n  API     %s\n  relay   %s (workers)\n          %s (@connections; SigV4 with this run's own key only)\n  store   %s\n%s\n%s\nwritten to %s (source it, and any OpenAI SDK uses the network)\n\n",
		stack.APIURL, stack.RelayURL, stack.ManagementURL, where, chainLine, lines, envFile)
	workerArgs := [][]string{{"--backend", "ollama", "--backend-url", ollamaURL}}
	switch {
	case gguf != "" && os.Getenv(envDevGGUF) != "":
		fmt.Printf("Serving %s from %s with the built-in engine\n\n", builtin.ModelID(gguf), gguf)
	case gguf != "":
		fmt.Printf("No inference backend reachable: Ollama at %s: %v\n"+
			"  Serving %q meanwhile: a random-weight demo model on the built-in engine (replies are random words).\n"+
			"  For real replies start Ollama (ollama serve; ollama pull llama3.2; the worker connects as soon as it is up),\n"+
			"  or set %s=<file.gguf> to serve a GGUF file with the built-in engine.\n\n",
			ollamaURL, ollamaErr, testmodel.DemoModelID, envDevGGUF)
	}
	if ollamaErr == nil {
		fmt.Printf("Ollama at %s: offering %s\n\n", ollamaURL, strings.Join(shortNames(ollamaModels), ", "))
	}
	if ring != nil {
		fmt.Print(ring.instructions(stack.RelayURL, envFile))
	}
	if gguf != "" {
		workerArgs = append(workerArgs, []string{"--backend", builtin.Name, "--gguf", gguf})
	}

	go watchOllama(ctx, stack.Catalog, ollamaURL, log)

	var workers []*exec.Cmd
	if *workerdBin != "" {
		for _, args := range workerArgs {
			w, err := startWorker(*workerdBin, home, stack.RelayURL, token, args)
			if err != nil {
				return err
			}
			workers = append(workers, w)
		}
	}
	select {
	case <-ctx.Done():
	case err := <-stack.Errors():
		log.Error("server stopped", "err", err)
	}
	// workerd drains its in-flight jobs on SIGTERM.
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		done := make(chan struct{})
		go func() { _ = w.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = w.Process.Kill()
		}
	}
	return nil
}

// Variables of the dev runner read here.
const (
	envManagementAddr = "C0MPUTE_RELAY_MANAGEMENT_ADDR"
	envRate           = "C0MPUTE_RATE_PER_MINUTE"
	envAccountRate    = "C0MPUTE_ACCOUNT_RATE_PER_MINUTE"
)

// canariesFromEnv is the canary runner's settings: C0MPUTE_CANARY_EVERY is
// each model's routine canary interval (a Go duration, default 1m; "0"
// turns canaries off).
func canariesFromEnv(getenv func(string) string) (*canary.Config, error) {
	v := getenv("C0MPUTE_CANARY_EVERY")
	if v == "" {
		return &canary.Config{Every: time.Minute}, nil
	}
	every, err := time.ParseDuration(v)
	if err != nil || every < 0 {
		return nil, fmt.Errorf("C0MPUTE_CANARY_EVERY must be a duration like 1m, or 0 for no canaries")
	}
	if every == 0 {
		return nil, nil
	}
	return &canary.Config{Every: every}, nil
}

// limitsFromEnv is api.DefaultLimits with the rate limits the environment
// sets: requests per minute per API key and per account (all its keys
// together). Each, when set, must be a positive integer.
func limitsFromEnv(getenv func(string) string) (api.Limits, error) {
	limits := api.DefaultLimits()
	for _, v := range []struct {
		name string
		dst  *int64
	}{{envRate, &limits.RatePerMinute}, {envAccountRate, &limits.AccountRatePerMinute}} {
		raw := getenv(v.name)
		if raw == "" {
			continue
		}
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n <= 0 {
			return api.Limits{}, fmt.Errorf("%s=%q: want a positive integer of requests per minute", v.name, raw)
		}
		*v.dst = n
	}
	return limits, nil
}

// openStore opens the store C0MPUTE_STORE names: "embedded" (the default,
// a file in home) or "dynamodb" (the table C0MPUTE_DYNAMODB_TABLE at
// C0MPUTE_DYNAMODB_ENDPOINT, or in AWS through the usual configuration
// chain; created if missing). where describes it for the start-up message.
func openStore(ctx context.Context, home string) (st store.Store, where string, err error) {
	switch kind := env("C0MPUTE_STORE", "embedded"); kind {
	case "embedded":
		path := filepath.Join(home, embeddedFile)
		st, err := embedded.Open(path)
		if errors.Is(err, embedded.ErrLocked) {
			return nil, "", fmt.Errorf("another scripts/dev (or a keeper) is running on the state folder %s: stop it, or start this one with another C0MPUTE_HOME", home)
		}
		return st, path, err
	case "dynamodb":
		cfg := dynamo.ConfigFromEnv()
		ds, err := dynamo.Open(ctx, cfg)
		if err != nil {
			return nil, "", err
		}
		// The relay starts now, so no connection from a previous run
		// exists: forget them as the embedded store does on open.
		if err := ds.ResetConnections(ctx, "gateway_restart", time.Now()); err != nil {
			return nil, "", err
		}
		where = "DynamoDB table " + env(dynamo.EnvTable, schema.DefaultTable)
		if cfg.Endpoint != "" {
			where += " at " + cfg.Endpoint
		}
		return ds, where, nil
	default:
		return nil, "", fmt.Errorf("C0MPUTE_STORE is %q: want embedded or dynamodb", kind)
	}
}

// keeperStore is the dev network's store as the keeper's configuration
// names it: the embedded store's absolute path, or dynamodb:TABLE.
func keeperStore(home string) (string, error) {
	if env("C0MPUTE_STORE", "embedded") == "dynamodb" {
		return "dynamodb:" + env(dynamo.EnvTable, schema.DefaultTable), nil
	}
	return filepath.Abs(filepath.Join(home, embeddedFile))
}

// embeddedFile is the embedded store's file in home.
const embeddedFile = "c0mpute.db"

// devCredentials makes (once) the dev account with its credits, and reuses
// the API key and worker token saved in home while they are still valid.
func devCredentials(ctx context.Context, stack *devnet.Stack, home string, credits int64) (apiKey, token string, err error) {
	if err := stack.Store.CreateAccount(ctx, store.Account{ID: devAccount, CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
		return "", "", err
	}
	// One grant per amount: restarting never adds credits twice, and a
	// new C0MPUTE_DEV_CREDITS value tops the account up once.
	if credits > 0 {
		if _, err := stack.Store.Grant(ctx, devAccount, credits, "dev-credits:"+strconv.FormatInt(credits, 10), false); err != nil {
			return "", "", err
		}
	}
	if apiKey, err = savedSecret(ctx, filepath.Join(home, "api-key"), stack.Store.GetAPIKey, stack.IssueAPIKey); err != nil {
		return "", "", err
	}
	if token, err = savedSecret(ctx, filepath.Join(home, "worker-token"), stack.Store.GetWorkerToken, stack.IssueWorkerToken); err != nil {
		return "", "", err
	}
	return apiKey, token, nil
}

// savedSecret returns the secret saved at path while the store still has it
// active, else issues a new one for the dev account and saves it.
func savedSecret(ctx context.Context, path string,
	lookup func(context.Context, string) (store.Secret, error),
	issue func(context.Context, string) (string, error)) (string, error) {
	if secret := readSecret(path); secret != "" {
		if rec, err := lookup(ctx, credential.Hash(secret)); err == nil && rec.Active() {
			return secret, nil
		}
	}
	secret, err := issue(ctx, devAccount)
	if err != nil {
		return "", err
	}
	return secret, os.WriteFile(path, []byte(secret), 0o600)
}

func readSecret(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// envDevGGUF names a GGUF file scripts/dev serves with the built-in engine.
const envDevGGUF = "C0MPUTE_DEV_GGUF"

// builtinModel returns the GGUF file the built-in engine should serve, and
// offers its model: C0MPUTE_DEV_GGUF's file under its name, or, when demo
// is set (no Ollama), a random-weight demo model generated into home once
// and labelled as such in /v1/models. "" when there is none to serve.
func builtinModel(cat *catalog.Catalog, home string, demo bool) (string, error) {
	price := devPrice(cat)
	if path := os.Getenv(envDevGGUF); path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("%s: %w", envDevGGUF, err)
		}
		m := catalog.Model{ID: builtin.ModelID(abs), Price: price, OwnedBy: builtin.Name}
		if _, ok := cat.Resolve(m.ID); !ok {
			if err := cat.Add(m); err != nil {
				return "", fmt.Errorf("%s: %w", envDevGGUF, err)
			}
		}
		return abs, nil
	}
	if !demo {
		return "", nil
	}
	path := filepath.Join(home, testmodel.DemoModelID+".gguf")
	if _, err := os.Stat(path); err != nil {
		if err := testmodel.WriteFile(path, testmodel.Demo()); err != nil {
			return "", fmt.Errorf("write the demo model: %w", err)
		}
	}
	m := catalog.Model{ID: testmodel.DemoModelID, Price: price, OwnedBy: builtin.Name, Note: testmodel.DemoNote}
	if err := cat.Add(m); err != nil {
		return "", err
	}
	return path, nil
}

// startWorker runs workerd as its own process, as a contributor would,
// creating its identity on first use; backend are its backend flags.
func startWorker(bin, home, relayURL, token string, backend []string) (*exec.Cmd, error) {
	keyFile := filepath.Join(home, "worker-key.json")
	workerEnv := append(os.Environ(), "C0MPUTE_HOME="+home, "C0MPUTE_WORKER_KEY="+keyFile)
	if _, err := os.Stat(keyFile); err != nil {
		init := exec.Command(bin, "init")
		init.Env, init.Stdout, init.Stderr = workerEnv, os.Stdout, os.Stderr
		if err := init.Run(); err != nil {
			return nil, fmt.Errorf("workerd init: %w", err)
		}
	}
	cmd := exec.Command(bin, append([]string{"run", "--relay", relayURL}, backend...)...)
	// The token goes by environment, not argv, so ps does not show it.
	cmd.Env = append(workerEnv, config.EnvToken+"="+token)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start workerd: %w", err)
	}
	return cmd, nil
}

// listOllama lists the models of the Ollama at base.
func listOllama(ctx context.Context, base string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/tags", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/tags: HTTP %d", resp.StatusCode)
	}
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tags); err != nil {
		return nil, fmt.Errorf("GET /api/tags: %w", err)
	}
	var out []string
	for _, m := range tags.Models {
		out = append(out, m.Name)
	}
	return out, nil
}

// servedModel is a model the dev network serves from the start: Ollama's
// first, else the built-in engine's file; "" when there is neither (an
// Ollama with nothing pulled).
func servedModel(ollamaModels []string, gguf string) string {
	if len(ollamaModels) > 0 {
		return agent.ShortName(ollamaModels[0])
	}
	if gguf != "" {
		return builtin.ModelID(gguf)
	}
	return ""
}

func shortNames(ms []string) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = agent.ShortName(m)
	}
	if len(out) == 0 {
		return []string{"(no models yet: ollama pull llama3.2)"}
	}
	return out
}

// devPrice is what a model the local network offers on its own (Ollama's,
// the built-in engine's) costs: c0mpute-pro's price, or the catalog's
// lowest when it has no c0mpute-pro.
func devPrice(cat *catalog.Catalog) int64 {
	if pro, ok := cat.Resolve("c0mpute-pro"); ok {
		return pro.Price
	}
	price := int64(0)
	for _, m := range cat.Models() {
		if price == 0 || m.Price < price {
			price = m.Price
		}
	}
	return max(price, 1)
}

// offerOllama adds each Ollama model under its own name, priced like
// c0mpute-pro (devPrice), naming that Ollama model as the one that serves
// it (what workerd setup pulls).
func offerOllama(cat *catalog.Catalog, models []string, log *slog.Logger) {
	price := devPrice(cat)
	for _, m := range models {
		name := agent.ShortName(m)
		if _, ok := cat.Resolve(name); ok {
			continue
		}
		if err := cat.Add(catalog.Model{ID: name, Price: price, OwnedBy: "ollama", Ollama: m}); err != nil {
			log.Warn("cannot offer Ollama model", "model", name, "err", err)
		}
	}
}

// watchOllama offers models pulled (or an Ollama started) after start-up.
func watchOllama(ctx context.Context, cat *catalog.Catalog, base string, log *slog.Logger) {
	// A local call: every 2 s, so an Ollama started (or a model pulled)
	// later is offered within seconds.
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if models, err := listOllama(ctx, base); err == nil {
				offerOllama(cat, models, log)
			}
		}
	}
}
