package devnet_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"image/png"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend/comfyui"
	"github.com/c0mpute/c0mpute/workerd/backend/comfyui/comfyuitest"
)

const (
	imageModel = "c0mpute-image"
	imagePrice = 20
	// imageMarker is in every image prompt: it must reach no log and no
	// store.
	imageMarker = "zq-image-marker-5d21e8"
)

// imageNet is a network with an image model, served by the real workerd
// agent over the comfyui backend on the ComfyUI stand-in, everything
// logging into one buffer the privacy checks read.
type imageNet struct {
	t       *testing.T
	stack   *devnet.Stack
	store   store.Store
	dump    func() []byte
	logs    *testenv.Buffer
	account string
	client  openai.Client
	comfy   *comfyuitest.Server
}

func startImageNet(t *testing.T, opts comfyuitest.Options) *imageNet {
	t.Helper()
	n := &imageNet{t: t, logs: &testenv.Buffer{}, account: "acct-" + t.Name()}
	n.store, n.dump = dynamotest.SuiteStoreWithDump(t)
	log := slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	limits := devnet.ScriptedLimits()
	limits.QueueWait = 5 * time.Second
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: n.store, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: tinyModel, Price: 10},
			{ID: imageModel, Price: imagePrice, Image: &catalog.ImageSpec{Sizes: []string{"512x512", "256x384"}}}},
		Limits: limits, BatchWindow: devnet.DevBatchWindow, Log: log, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	n.stack = stack
	key, err := stack.CreateAccount(context.Background(), n.account, 1000, "test-grant")
	if err != nil {
		t.Fatal(err)
	}
	n.client = openai.NewClient(option.WithBaseURL(stack.APIURL+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))

	n.comfy = comfyuitest.Start(t, opts)
	be, err := comfyui.New(n.comfy.URL)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := stack.IssueWorkerToken(context.Background(), n.account)
	if err != nil {
		t.Fatal(err)
	}
	_, wkey, _ := ed25519.GenerateKey(rand.Reader)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := agent.New(agent.Config{RelayURL: stack.RelayURL, Token: tok, Key: wkey, Backend: be,
		Models: map[string]string{imageModel: comfyuitest.DefaultCheckpoint}, Log: log.With("worker", t.Name()),
		Version: "test", DrainTimeout: 5 * time.Second})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ws, err := n.store.IdleWorkers(context.Background(), imageModel)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 {
			if !ws[0].Caps[imageModel].Image {
				t.Fatalf("the worker registered %s without the image capability: %+v", imageModel, ws[0].Caps)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the image worker did not register within 20 s")
		}
	}
	return n
}

func (n *imageNet) credits() int64 {
	n.t.Helper()
	a, err := n.store.GetAccount(context.Background(), n.account)
	if err != nil {
		n.t.Fatal(err)
	}
	return a.Credits
}

// checkPrivate fails the test if the marker reached a log or the store.
func (n *imageNet) checkPrivate() {
	n.t.Helper()
	if bytes.Contains(n.logs.Bytes(), []byte(imageMarker)) {
		n.t.Error("an image prompt reached the logs")
	}
	if bytes.Contains(n.dump(), []byte(imageMarker)) {
		n.t.Error("an image prompt reached the store")
	}
}

// TestImagesGoSDK: the official Go SDK's Images.Generate through the whole
// network returns the stand-in's PNG of the size asked for, at the image
// price, debited once; nothing of the prompt is logged or stored.
func TestImagesGoSDK(t *testing.T) {
	n := startImageNet(t, comfyuitest.Options{})
	ctx := context.Background()
	before := n.credits()
	for i, tc := range []struct {
		size          openai.ImageGenerateParamsSize
		width, height int
	}{
		{"256x384", 256, 384},
		{"", 512, 512}, // the catalogue's default
	} {
		res, err := n.client.Images.Generate(ctx, openai.ImageGenerateParams{Model: imageModel, Size: tc.size,
			Prompt:         "a lighthouse at dusk (" + imageMarker + ")",
			ResponseFormat: openai.ImageGenerateParamsResponseFormatB64JSON, User: openai.String("end-user-7")})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Data) != 1 || res.Created == 0 {
			t.Fatalf("response %+v", res)
		}
		b, err := base64.StdEncoding.DecodeString(res.Data[0].B64JSON)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil || img.Bounds().Dx() != tc.width || img.Bounds().Dy() != tc.height {
			t.Fatalf("image %v, %v; want a %dx%d PNG", img.Bounds(), err, tc.width, tc.height)
		}
		if got := before - n.credits(); got != int64(i+1)*imagePrice {
			t.Fatalf("after %d images %d credits were debited, want %d", i+1, got, (i+1)*imagePrice)
		}
	}
	if c := n.comfy.Counts(); c.Queued != 2 || c.Views != 2 {
		t.Fatalf("ComfyUI stand-in saw %+v, want two prompts and two views", c)
	}
	// The buffer is the log of the gateway and the worker both.
	if logs := n.logs.String(); !strings.Contains(logs, "image job done") || !strings.Contains(logs, "worker registered") {
		t.Fatal("the captured logs are not the network's")
	}
	n.checkPrivate()
}

// TestImageRefundedWhenTheWorkflowFails: a workflow that fails on the
// worker costs the user nothing, and the failure's server text (which
// quotes the prompt here) reaches no log.
func TestImageRefundedWhenTheWorkflowFails(t *testing.T) {
	n := startImageNet(t, comfyuitest.Options{FailWith: "sampling failed on " + imageMarker})
	before := n.credits()
	_, err := n.client.Images.Generate(context.Background(), openai.ImageGenerateParams{Model: imageModel,
		Prompt: "a lighthouse (" + imageMarker + ")", ResponseFormat: openai.ImageGenerateParamsResponseFormatB64JSON})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "worker_error" {
		t.Fatalf("err = %v, want a 502 worker_error", err)
	}
	// The refund is written before the answer: no wait.
	if after := n.credits(); after != before {
		t.Fatalf("credits %d after a failed image, %d before: want a refund", after, before)
	}
	if !strings.Contains(n.logs.String(), "image job failed") {
		t.Fatal("the worker did not report the failed workflow")
	}
	n.checkPrivate()
}

// TestImageWrongSizeRefunded: a backend whose image is not the size asked
// for fails the job on the worker (which checks before sending), refunded.
func TestImageWrongSizeRefunded(t *testing.T) {
	n := startImageNet(t, comfyuitest.Options{SizeOff: 8})
	before := n.credits()
	_, err := n.client.Images.Generate(context.Background(), openai.ImageGenerateParams{Model: imageModel,
		Prompt: "p " + imageMarker, ResponseFormat: openai.ImageGenerateParamsResponseFormatB64JSON})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway {
		t.Fatalf("err = %v, want a 502", err)
	}
	if after := n.credits(); after != before {
		t.Fatalf("credits %d after a failed image, %d before: want a refund", after, before)
	}
	n.checkPrivate()
}

// TestImageRequestsRefused: what the network does not offer is a 400
// naming the parameter, before any charge.
func TestImageRequestsRefused(t *testing.T) {
	n := startImageNet(t, comfyuitest.Options{})
	ctx := context.Background()
	before := n.credits()
	entries := func() int {
		es, err := n.store.Entries(ctx, n.account, "", store.MaxEntries)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	ledger := entries()
	ok := openai.ImageGenerateParams{Model: imageModel, Prompt: "p", ResponseFormat: openai.ImageGenerateParamsResponseFormatB64JSON}
	for _, tc := range []struct {
		name  string
		edit  func(p *openai.ImageGenerateParams)
		param string
	}{
		{"n=2", func(p *openai.ImageGenerateParams) { p.N = openai.Int(2) }, "n"},
		{"url", func(p *openai.ImageGenerateParams) { p.ResponseFormat = openai.ImageGenerateParamsResponseFormatURL }, "response_format"},
		{"chat model", func(p *openai.ImageGenerateParams) { p.Model = tinyModel }, "model"},
		{"size not offered", func(p *openai.ImageGenerateParams) { p.Size = openai.ImageGenerateParamsSize1024x1024 }, "size"},
		{"style", func(p *openai.ImageGenerateParams) { p.Style = openai.ImageGenerateParamsStyleVivid }, "style"},
		{"no prompt", func(p *openai.ImageGenerateParams) { p.Prompt = "" }, "prompt"},
		// Within the 32,000 characters, but six bytes each once escaped:
		// more than one relay message holds, refused before the charge.
		{"prompt too large to relay", func(p *openai.ImageGenerateParams) { p.Prompt = strings.Repeat("\x01", 32000) }, "prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.edit(&p)
			_, err := n.client.Images.Generate(ctx, p)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != tc.param {
				t.Fatalf("err = %v, want a 400 naming %s", err, tc.param)
			}
		})
	}
	// An image model sent to chat completions.
	_, err := n.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: imageModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "model" {
		t.Fatalf("chat with an image model: err = %v, want a 400 naming model", err)
	}
	if after := n.credits(); after != before {
		t.Fatalf("refused requests moved credits: %d, then %d", before, after)
	}
	if after := entries(); after != ledger {
		t.Fatalf("refused requests wrote %d ledger entries (a charge and its refund each), want none", after-ledger)
	}
	if c := n.comfy.Counts(); c.Queued != 0 {
		t.Fatalf("a refused request reached ComfyUI: %+v", c)
	}
}

// nodeImageTests is how many tests infra/sdktest/node/images.test.mjs has.
const nodeImageTests = 4

// TestNodeSDKImages runs the official OpenAI Node SDK's images.generate
// (npm openai, pinned in infra/sdktest/node) unchanged against the network.
func TestNodeSDKImages(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "no node on PATH")
	}
	dir := filepath.Join(moduleRoot(t), "infra", "sdktest", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		testenv.Missing(t, "the openai npm package", "run scripts/test (npm ci in infra/sdktest/node)")
	}
	n := startImageNet(t, comfyuitest.Options{})
	key, err := n.stack.IssueAPIKey(context.Background(), n.account)
	if err != nil {
		t.Fatal(err)
	}
	before := n.credits()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", "images.test.mjs")
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(withoutOpenAIEnv(os.Environ()),
		"OPENAI_BASE_URL="+n.stack.APIURL, "OPENAI_API_KEY="+key,
		"C0MPUTE_IMAGE_MODEL="+imageModel, "C0MPUTE_CHAT_MODEL="+tinyModel, "C0MPUTE_IMAGE_SIZE=256x384",
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	out, err := cmd.CombinedOutput()
	if pass, fail := tapCount(out, "pass"), tapCount(out, "fail"); err != nil || fail != 0 || pass < nodeImageTests {
		t.Fatalf("node --test images.test.mjs: %v; pass %d (want %d), fail %d; output:\n%s", err, pass, nodeImageTests, fail, out)
	}
	// One image rendered, the refused requests free.
	if got := before - n.credits(); got != imagePrice {
		t.Fatalf("the run was charged %d credits, want %d (one image)", got, imagePrice)
	}
	if c := n.comfy.Counts(); c.Queued != 1 {
		t.Fatalf("ComfyUI stand-in saw %+v, want one prompt", c)
	}
	n.checkPrivate()
}
