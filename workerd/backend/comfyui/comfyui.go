// Package comfyui is workerd's backend for ComfyUI, which renders the
// network's image models. It speaks ComfyUI's HTTP and WebSocket API: a job
// opens /ws?clientId=…, queues its workflow with POST /prompt under that
// client id, follows the progress, executing, executed and
// execution_error messages for its prompt id, then reads its image's name
// from GET /history/{prompt_id} and the image from GET /view. A cancelled
// job is interrupted (POST /interrupt) and dropped from the queue (POST
// /queue). Models are the checkpoints CheckpointLoaderSimple offers; GET
// /system_stats reports the device and its VRAM.
//
// The workflow is the built-in text-to-image graph or one the contributor
// exports from ComfyUI (API format) with placeholders for what each job
// sets; either is checked when workerd starts. Everything read from the
// server is bounded, and the server's own error text — which may quote the
// prompt — is kept out of what workerd logs and forwards (backend.Redacted).
package comfyui

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// Bounds on what the server can make workerd read.
const (
	// maxJSON bounds an API answer: a history entry repeats the whole
	// workflow, and object_info lists every checkpoint.
	maxJSON = 8 << 20
	// maxWSMessage bounds one WebSocket message: status JSON is small,
	// but ComfyUI also sends sampler previews as binary messages.
	maxWSMessage = 8 << 20
	// maxImage is the largest image the network relays.
	maxImage = relaymsg.MaxImageBytes
	// maxErrorBody bounds an error answer's body.
	maxErrorBody = 64 << 10
	// cancelTimeout bounds the interrupt and queue calls after a cancel.
	cancelTimeout = 5 * time.Second
)

// Backend is a ComfyUI server.
type Backend struct {
	base     *url.URL
	client   *http.Client
	workflow *Workflow
	negative string
}

// Option configures a Backend.
type Option func(*Backend)

// WithWorkflow renders jobs with w instead of DefaultWorkflow.
func WithWorkflow(w *Workflow) Option { return func(b *Backend) { b.workflow = w } }

// WithNegativePrompt sets what {{negative_prompt}} becomes (default empty):
// the OpenAI API has no negative prompt, so it is the contributor's.
func WithNegativePrompt(s string) Option { return func(b *Backend) { b.negative = s } }

// WithHTTPClient replaces the HTTP client (its Timeout must be 0 or longer
// than any rendering: requests are bounded by their contexts).
func WithHTTPClient(c *http.Client) Option { return func(b *Backend) { b.client = c } }

// New makes a backend for the ComfyUI server at baseURL (e.g.
// http://127.0.0.1:8188).
func New(baseURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("comfyui: backend URL %q is not http(s)://host:port", baseURL)
	}
	b := &Backend{base: u, client: &http.Client{}}
	for _, o := range opts {
		o(b)
	}
	if b.workflow == nil {
		b.workflow = DefaultWorkflow()
	}
	return b, nil
}

// Name is "comfyui".
func (b *Backend) Name() string { return "comfyui" }

// Chat is refused: ComfyUI renders images, and the gateway sends it none.
func (b *Backend) Chat(context.Context, string, *oaiwire.ChatRequest, func(oaiwire.Delta) error) (backend.Result, error) {
	return backend.Result{}, errors.New("comfyui: this backend renders images only; it serves no chat")
}

// Capabilities says every checkpoint renders images.
func (b *Backend) Capabilities(context.Context, string) (backend.Capabilities, error) {
	return backend.Capabilities{Image: true}, nil
}

// Models lists the checkpoints CheckpointLoaderSimple offers (ComfyUI's
// /object_info, in its older list form or its newer COMBO form), or, on a
// server without that route, /models/checkpoints.
func (b *Backend) Models(ctx context.Context) ([]string, error) {
	var info map[string]struct {
		Input struct {
			Required map[string]json.RawMessage `json:"required"`
		} `json:"input"`
	}
	status, err := b.getJSON(ctx, "/object_info/CheckpointLoaderSimple", nil, &info)
	if status == http.StatusNotFound {
		var names []string
		if _, err := b.getJSON(ctx, "/models/checkpoints", nil, &names); err != nil {
			return nil, err
		}
		return names, nil
	}
	if err != nil {
		return nil, err
	}
	raw, ok := info["CheckpointLoaderSimple"].Input.Required["ckpt_name"]
	if !ok {
		return nil, errors.New("comfyui: /object_info/CheckpointLoaderSimple has no ckpt_name input")
	}
	names, err := comboOptions(raw)
	if err != nil {
		return nil, fmt.Errorf("comfyui: ckpt_name: %w", err)
	}
	return names, nil
}

// comboOptions reads a combo input's choices: [[choices…], {…}] (older
// ComfyUI) or ["COMBO", {"options": [choices…]}] (newer).
func comboOptions(raw json.RawMessage) ([]string, error) {
	var spec []json.RawMessage
	if err := json.Unmarshal(raw, &spec); err != nil || len(spec) == 0 {
		return nil, errors.New("not a combo input")
	}
	var names []string
	if err := json.Unmarshal(spec[0], &names); err == nil {
		return names, nil
	}
	var kind string
	if err := json.Unmarshal(spec[0], &kind); err != nil || kind != "COMBO" || len(spec) < 2 {
		return nil, errors.New("not a combo input")
	}
	var opts struct {
		Options []string `json:"options"`
	}
	if err := json.Unmarshal(spec[1], &opts); err != nil {
		return nil, errors.New("combo without options")
	}
	return opts.Options, nil
}

// SystemStats is what GET /system_stats says of the server's devices.
type SystemStats struct {
	ComfyUIVersion string   `json:"comfyui_version"`
	Devices        []Device `json:"devices"`
}

// Device is one of the server's compute devices.
type Device struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	VRAMTotal int64  `json:"vram_total"`
	VRAMFree  int64  `json:"vram_free"`
}

// SystemStats reads GET /system_stats: whether the server is up, and its
// devices and their VRAM.
func (b *Backend) SystemStats(ctx context.Context) (SystemStats, error) {
	var raw struct {
		System struct {
			ComfyUIVersion string `json:"comfyui_version"`
		} `json:"system"`
		Devices []Device `json:"devices"`
	}
	if _, err := b.getJSON(ctx, "/system_stats", nil, &raw); err != nil {
		return SystemStats{}, err
	}
	return SystemStats{ComfyUIVersion: raw.System.ComfyUIVersion, Devices: raw.Devices}, nil
}

// Image renders req with the workflow on the checkpoint named model.
func (b *Backend) Image(ctx context.Context, model string, req backend.ImageRequest, progress func(step, total int)) (backend.Image, error) {
	if progress == nil {
		progress = func(int, int) {}
	}
	clientID := randomHex(16)
	// The socket opens first, so that no message of the prompt is missed.
	wsURL := *b.base
	wsURL.Scheme = map[string]string{"http": "ws", "https": "wss"}[b.base.Scheme]
	wsURL.Path += "/ws"
	wsURL.RawQuery = url.Values{"clientId": {clientID}}.Encode()
	ws, _, err := websocket.Dial(ctx, wsURL.String(), &websocket.DialOptions{HTTPClient: b.client})
	if err != nil {
		return backend.Image{}, fmt.Errorf("comfyui: open %s: %w", wsURL.Redacted(), err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(maxWSMessage)
	// ComfyUI registers a socket, then greets it with a status message
	// naming its sid: a prompt queued before that could run unwatched.
	if err := awaitStatus(ctx, ws); err != nil {
		return backend.Image{}, err
	}

	graph := b.workflow.graph(values{prompt: req.Prompt, negative: b.negative, checkpoint: model,
		width: req.Width, height: req.Height, seed: randomSeed()})
	promptID, err := b.queue(ctx, clientID, graph)
	if err != nil {
		return backend.Image{}, err
	}
	// ComfyUI keeps every prompt's graph, the user's prompt in it, in its
	// history until it restarts: the job's entry goes once it is over.
	defer b.forget(promptID)
	if err := b.follow(ctx, ws, promptID, progress); err != nil {
		if ctx.Err() != nil {
			b.cancel(promptID)
			return backend.Image{}, context.Cause(ctx)
		}
		return backend.Image{}, err
	}
	ref, err := b.outputImage(ctx, promptID)
	if err != nil {
		return backend.Image{}, err
	}
	png, err := b.view(ctx, ref)
	if err != nil {
		return backend.Image{}, err
	}
	return backend.Image{PNG: png}, nil
}

// serverError is an error answer or message from ComfyUI: safe is ours,
// detail is the server's text, which may quote the prompt.
type serverError struct {
	safe, detail string
}

func (e *serverError) Error() string {
	if e.detail == "" {
		return e.safe
	}
	return e.safe + ": " + e.detail
}

// Redacted is the error without the server's text.
func (e *serverError) Redacted() string { return e.safe }

// queue posts the graph and returns its prompt id.
func (b *Backend) queue(ctx context.Context, clientID string, graph map[string]node) (string, error) {
	body, err := json.Marshal(map[string]any{"prompt": graph, "client_id": clientID})
	if err != nil {
		return "", fmt.Errorf("comfyui: encode the workflow: %w", err)
	}
	var out struct {
		PromptID string `json:"prompt_id"`
	}
	if _, err := b.do(ctx, http.MethodPost, "/prompt", nil, body, &out); err != nil {
		return "", err
	}
	if out.PromptID == "" || len(out.PromptID) > 128 {
		return "", errors.New("comfyui: POST /prompt answered without a prompt_id")
	}
	return out.PromptID, nil
}

// wsMessage is a JSON message on ComfyUI's socket.
type wsMessage struct {
	Type string `json:"type"`
	Data struct {
		PromptID string          `json:"prompt_id"`
		Node     json.RawMessage `json:"node"`
		Value    int             `json:"value"`
		Max      int             `json:"max"`
		// execution_error
		NodeType      string `json:"node_type"`
		ExceptionType string `json:"exception_type"`
		Message       string `json:"exception_message"`
	} `json:"data"`
}

// follow reads the socket until the prompt finished (executing with node
// null, or execution_success), failed or was interrupted.
func (b *Backend) follow(ctx context.Context, ws *websocket.Conn, promptID string, progress func(step, total int)) error {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("comfyui: the progress socket closed before the image was rendered: %w", err)
		}
		if typ != websocket.MessageText {
			continue // a sampler preview
		}
		var m wsMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("comfyui: unreadable socket message: %w", err)
		}
		if m.Data.PromptID != promptID {
			continue // another client's prompt, or a status message
		}
		switch m.Type {
		case "progress":
			progress(m.Data.Value, m.Data.Max)
		case "executing":
			if string(m.Data.Node) == "null" {
				return nil
			}
		case "execution_success":
			return nil
		case "execution_error":
			return &serverError{safe: fmt.Sprintf("comfyui: node %s failed (%s)", short(m.Data.NodeType), short(m.Data.ExceptionType)),
				detail: short(m.Data.Message)}
		case "execution_interrupted":
			return errors.New("comfyui: the prompt was interrupted on the server")
		}
	}
}

// awaitStatus reads the socket up to ComfyUI's greeting.
func awaitStatus(ctx context.Context, ws *websocket.Conn) error {
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("comfyui: the progress socket closed before ComfyUI greeted it: %w", err)
		}
		var m wsMessage
		if typ == websocket.MessageText && json.Unmarshal(data, &m) == nil && m.Type == "status" {
			return nil
		}
	}
}

// imageRef names an image ComfyUI wrote.
type imageRef struct {
	Filename  string `json:"filename"`
	Subfolder string `json:"subfolder"`
	Type      string `json:"type"`
}

// outputImage reads the prompt's history for the output node's image.
func (b *Backend) outputImage(ctx context.Context, promptID string) (imageRef, error) {
	var hist map[string]struct {
		Outputs map[string]struct {
			Images []imageRef `json:"images"`
		} `json:"outputs"`
		Status struct {
			StatusStr string `json:"status_str"`
			Completed bool   `json:"completed"`
		} `json:"status"`
	}
	if _, err := b.getJSON(ctx, "/history/"+url.PathEscape(promptID), nil, &hist); err != nil {
		return imageRef{}, err
	}
	entry, ok := hist[promptID]
	switch {
	case !ok:
		return imageRef{}, errors.New("comfyui: the prompt is not in /history")
	case entry.Status.StatusStr == "error":
		return imageRef{}, errors.New("comfyui: /history says the prompt failed")
	}
	imgs := entry.Outputs[b.workflow.output].Images
	if len(imgs) == 0 {
		return imageRef{}, fmt.Errorf("comfyui: /history lists no image from the output node %q", b.workflow.output)
	}
	ref := imgs[0]
	if ref.Filename == "" || len(ref.Filename) > 1024 || len(ref.Subfolder) > 1024 || !slices.Contains([]string{"output", "temp"}, ref.Type) {
		return imageRef{}, errors.New("comfyui: /history names the image oddly (no file name, or a type other than output or temp)")
	}
	return ref, nil
}

// view fetches an image, refusing one over the network's limit.
func (b *Backend) view(ctx context.Context, ref imageRef) ([]byte, error) {
	q := url.Values{"filename": {ref.Filename}, "subfolder": {ref.Subfolder}, "type": {ref.Type}}
	resp, err := b.request(ctx, http.MethodGet, "/view", q, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	img, err := readBounded(resp.Body, maxImage, "image")
	if err != nil {
		return nil, fmt.Errorf("comfyui: GET /view: %w", err)
	}
	return img, nil
}

// forget deletes the prompt from ComfyUI's history (POST /history
// {"delete": [id]}). Best effort: the job is over either way.
func (b *Backend) forget(promptID string) {
	ctx, stop := context.WithTimeout(context.Background(), cancelTimeout)
	defer stop()
	body, _ := json.Marshal(map[string]any{"delete": []string{promptID}})
	_, _ = b.do(ctx, http.MethodPost, "/history", nil, body, nil)
}

// cancel interrupts the prompt if it runs and drops it if it waits. Best
// effort: the job is over either way.
func (b *Backend) cancel(promptID string) {
	ctx, stop := context.WithTimeout(context.Background(), cancelTimeout)
	defer stop()
	body, _ := json.Marshal(map[string]any{"prompt_id": promptID})
	_, _ = b.do(ctx, http.MethodPost, "/interrupt", nil, body, nil)
	body, _ = json.Marshal(map[string]any{"delete": []string{promptID}})
	_, _ = b.do(ctx, http.MethodPost, "/queue", nil, body, nil)
}

func (b *Backend) getJSON(ctx context.Context, path string, q url.Values, out any) (int, error) {
	return b.do(ctx, http.MethodGet, path, q, nil, out)
}

// do makes one API call and decodes its JSON answer into out (if not nil);
// it returns the HTTP status.
func (b *Backend) do(ctx context.Context, method, path string, q url.Values, body []byte, out any) (int, error) {
	resp, err := b.request(ctx, method, path, q, body)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) {
			return se.status, err
		}
		return 0, err
	}
	defer resp.Body.Close()
	b2, err := readBounded(resp.Body, maxJSON, "answer")
	if err != nil {
		return resp.StatusCode, fmt.Errorf("comfyui: %s %s: %w", method, path, err)
	}
	if out != nil {
		if err := json.Unmarshal(b2, out); err != nil {
			return resp.StatusCode, fmt.Errorf("comfyui: %s %s: the answer is not the JSON expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// statusError is a non-2xx answer.
type statusError struct {
	serverError
	status int
}

// request sends one request and returns a 2xx response.
func (b *Backend) request(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	u := *b.base
	u.Path += path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("comfyui: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("comfyui: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	text, _ := readBounded(resp.Body, maxErrorBody, "error")
	safe := fmt.Sprintf("comfyui: %s %s: HTTP %d", method, path, resp.StatusCode)
	// ComfyUI answers a workflow it refuses with {"error":{"type",
	// "message",…},"node_errors":{…}}: the type is a fixed code, safe to
	// show; the rest may quote inputs, the prompt among them.
	var e struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(text, &e) == nil && e.Error.Type != "" {
		safe += " (" + short(e.Error.Type) + ")"
	}
	return nil, &statusError{serverError: serverError{safe: safe, detail: short(string(text))}, status: resp.StatusCode}
}

// readBounded reads r whole, failing past limit bytes.
func readBounded(r io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read the %s: %w", what, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("the %s is %w of %d bytes", what, errTooLarge, limit)
	}
	return b, nil
}

// short bounds a string from the server for an error.
func short(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomSeed is a sampler seed: 53 bits, which every JSON reader keeps
// exact.
func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 11
}
