// Package comfyuitest is a STAND-IN for ComfyUI, for tests: ComfyUI needs
// PyTorch and cannot run on the machines the tests run on. It is written
// from ComfyUI's documented server API, not from its code, and serves the
// routes workerd's comfyui backend calls with ComfyUI's shapes:
//
//   - GET /system_stats, GET /object_info/CheckpointLoaderSimple (the
//     newer ["COMBO", {"options": …}] form), GET /models/checkpoints;
//   - GET /ws?clientId=… with the status, execution_start,
//     execution_cached, executing, progress, executed,
//     execution_success, execution_error and execution_interrupted
//     messages, addressed to the client that queued the prompt;
//   - POST /prompt, which checks the workflow's graph as ComfyUI's
//     validation does for the node classes of a text-to-image graph
//     (class known, required inputs present and of the right type, links
//     to existing nodes of the right output type, the checkpoint offered,
//     an output node) and answers 400 with error and node_errors when it
//     fails;
//   - GET /history/{prompt_id}, POST /history (delete), GET /view,
//     POST /interrupt, POST /queue.
//
// Running a prompt "renders" a real PNG of the latent's size: a
// deterministic pattern from the seed, so the bytes are an image any
// decoder reads. Nothing here samples a model.
package comfyuitest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Options shape the stand-in's behaviour for a test.
type Options struct {
	// Checkpoints are the models offered (default one, "sd_xl_base_1.0.safetensors").
	Checkpoints []string
	// FailWith, when set, makes every prompt fail in its KSampler with
	// this exception message (an execution_error).
	FailWith string
	// Hold makes the sampler stop after its first step until Release is
	// called or the prompt is interrupted.
	Hold bool
	// BadHistory makes /history answer JSON that is not a history.
	BadHistory bool
	// ViewBytes, when not 0, makes /view answer this many bytes of
	// padding instead of the image.
	ViewBytes int
	// SizeOff renders images this many pixels wider than asked.
	SizeOff int
}

// Server is a running stand-in.
type Server struct {
	*httptest.Server
	opts Options

	mu        sync.Mutex
	clients   map[string]*websocket.Conn
	history   map[string]json.RawMessage
	files     map[string][]byte
	running   map[string]chan struct{} // prompt id → closed on interrupt
	release   chan struct{}
	queued    int
	views     int
	interrupt int
	deleted   []string
	prompts   []map[string]any
}

// DefaultCheckpoint is the checkpoint offered when Options names none.
const DefaultCheckpoint = "sd_xl_base_1.0.safetensors"

// Start runs a stand-in until the test ends.
func Start(t interface {
	Cleanup(func())
	Helper()
}, opts Options) *Server {
	t.Helper()
	if len(opts.Checkpoints) == 0 {
		opts.Checkpoints = []string{DefaultCheckpoint}
	}
	s := &Server{opts: opts, clients: map[string]*websocket.Conn{}, history: map[string]json.RawMessage{},
		files: map[string][]byte{}, running: map[string]chan struct{}{}, release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /system_stats", s.systemStats)
	mux.HandleFunc("GET /object_info/CheckpointLoaderSimple", s.objectInfo)
	mux.HandleFunc("GET /models/checkpoints", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.opts.Checkpoints) })
	mux.HandleFunc("GET /ws", s.ws)
	mux.HandleFunc("POST /prompt", s.prompt)
	mux.HandleFunc("GET /history/{id}", s.historyOf)
	mux.HandleFunc("GET /view", s.view)
	mux.HandleFunc("POST /interrupt", s.interruptPrompt)
	mux.HandleFunc("POST /queue", s.queue)
	mux.HandleFunc("POST /history", s.deleteHistory)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// Release lets held samplers go on.
func (s *Server) Release() { close(s.release) }

// Counts are what the stand-in saw.
type Counts struct {
	Queued, Views, Interrupts int
	Deleted                   []string
}

// Counts reports what the stand-in saw so far.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{Queued: s.queued, Views: s.views, Interrupts: s.interrupt, Deleted: slices.Clone(s.deleted)}
}

// Prompts are the graphs queued so far, as posted.
func (s *Server) Prompts() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.prompts)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) systemStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{
		"system": map[string]any{"os": "posix", "comfyui_version": "0.3.40-standin", "python_version": "3.12", "embedded_python": false,
			"ram_total": 68719476736, "ram_free": 34359738368},
		"devices": []any{map[string]any{"name": "cuda:0 stand-in", "type": "cuda", "index": 0,
			"vram_total": 25757220864, "vram_free": 24000000000, "torch_vram_total": 0, "torch_vram_free": 0}},
	})
}

func (s *Server) objectInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{"CheckpointLoaderSimple": map[string]any{
		"input": map[string]any{"required": map[string]any{
			"ckpt_name": []any{"COMBO", map[string]any{"options": s.opts.Checkpoints}}}},
		"output": []string{"MODEL", "CLIP", "VAE"}, "name": "CheckpointLoaderSimple", "output_node": false,
	}})
}

func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("clientId")
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	if id == "" {
		id = randomID()
	}
	s.mu.Lock()
	s.clients[id] = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients, id)
		s.mu.Unlock()
		c.CloseNow()
	}()
	s.send(id, "status", map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": 0}}, "sid": id})
	// Read until the client goes (ComfyUI ignores what clients send).
	for {
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
	}
}

// send writes one JSON message to a client, if it is connected.
func (s *Server) send(client, typ string, data map[string]any) {
	s.mu.Lock()
	c := s.clients[client]
	s.mu.Unlock()
	if c == nil {
		return
	}
	b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Write(ctx, websocket.MessageText, b)
}

// nodeClass is what the stand-in knows of a node class: its required
// inputs (a type name, or "link:TYPE" for a link to an output of TYPE) and
// its outputs.
type nodeClass struct {
	inputs  map[string]string
	outputs []string
	output  bool
}

var classes = map[string]nodeClass{
	"CheckpointLoaderSimple": {inputs: map[string]string{"ckpt_name": "STRING"}, outputs: []string{"MODEL", "CLIP", "VAE"}},
	"CLIPTextEncode":         {inputs: map[string]string{"text": "STRING", "clip": "link:CLIP"}, outputs: []string{"CONDITIONING"}},
	"EmptyLatentImage":       {inputs: map[string]string{"width": "INT", "height": "INT", "batch_size": "INT"}, outputs: []string{"LATENT"}},
	"KSampler": {inputs: map[string]string{"seed": "INT", "steps": "INT", "cfg": "FLOAT", "sampler_name": "STRING", "scheduler": "STRING",
		"denoise": "FLOAT", "model": "link:MODEL", "positive": "link:CONDITIONING", "negative": "link:CONDITIONING", "latent_image": "link:LATENT"},
		outputs: []string{"LATENT"}},
	"VAEDecode":    {inputs: map[string]string{"samples": "link:LATENT", "vae": "link:VAE"}, outputs: []string{"IMAGE"}},
	"SaveImage":    {inputs: map[string]string{"images": "link:IMAGE", "filename_prefix": "STRING"}, output: true},
	"PreviewImage": {inputs: map[string]string{"images": "link:IMAGE"}, output: true},
}

type node struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
}

// validate checks a graph as ComfyUI's validate_prompt does for these
// classes, returning node_errors (empty when it passes).
func (s *Server) validate(graph map[string]node) map[string]any {
	errs := map[string]any{}
	bad := func(id, class, typ, msg string) {
		e, _ := errs[id].(map[string]any)
		if e == nil {
			e = map[string]any{"errors": []any{}, "class_type": class, "dependent_outputs": []any{}}
		}
		e["errors"] = append(e["errors"].([]any), map[string]any{"type": typ, "message": msg, "details": "", "extra_info": map[string]any{}})
		errs[id] = e
	}
	outputs := 0
	for id, n := range graph {
		cls, ok := classes[n.ClassType]
		if !ok {
			bad(id, n.ClassType, "invalid_prompt", "Cannot execute because node "+n.ClassType+" does not exist.")
			continue
		}
		if cls.output {
			outputs++
		}
		for name, want := range cls.inputs {
			v, ok := n.Inputs[name]
			if !ok {
				if name == "filename_prefix" {
					continue // optional in SaveImage (default "ComfyUI")
				}
				bad(id, n.ClassType, "required_input_missing", "Required input is missing: "+name)
				continue
			}
			switch {
			case len(want) > 5 && want[:5] == "link:":
				l, ok := v.([]any)
				if !ok || len(l) != 2 {
					bad(id, n.ClassType, "bad_linked_input", "Bad linked input, must be a length-2 list of [node_id, slot_index]: "+name)
					continue
				}
				from, _ := l[0].(string)
				slot, _ := l[1].(float64)
				src, ok := graph[from]
				srcCls := classes[src.ClassType]
				if !ok || int(slot) < 0 || int(slot) >= len(srcCls.outputs) || srcCls.outputs[int(slot)] != want[5:] {
					bad(id, n.ClassType, "return_type_mismatch", "Return type mismatch between linked nodes: "+name)
				}
			case want == "INT":
				f, ok := v.(float64)
				if !ok || f != float64(int64(f)) || f < 0 {
					bad(id, n.ClassType, "invalid_input_type", "Failed to convert an input value to a INT value: "+name)
				}
			case want == "FLOAT":
				if _, ok := v.(float64); !ok {
					bad(id, n.ClassType, "invalid_input_type", "Failed to convert an input value to a FLOAT value: "+name)
				}
			case want == "STRING":
				if _, ok := v.(string); !ok {
					bad(id, n.ClassType, "invalid_input_type", "Failed to convert an input value to a STRING value: "+name)
				}
			}
		}
		switch n.ClassType {
		case "CheckpointLoaderSimple":
			if name, _ := n.Inputs["ckpt_name"].(string); !slices.Contains(s.opts.Checkpoints, name) {
				bad(id, n.ClassType, "value_not_in_list", "Value not in list: ckpt_name")
			}
		case "EmptyLatentImage":
			for _, side := range []string{"width", "height"} {
				if f, _ := n.Inputs[side].(float64); f < 16 || f > 16384 || int(f)%8 != 0 {
					bad(id, n.ClassType, "value_not_valid", side+" must be 16 to 16384, a multiple of 8")
				}
			}
		case "KSampler":
			if f, _ := n.Inputs["steps"].(float64); f < 1 || f > 10000 {
				bad(id, n.ClassType, "value_smaller_than_min", "Value smaller than min: steps")
			}
		}
	}
	if outputs == 0 && len(errs) == 0 {
		errs[""] = "prompt_no_outputs"
	}
	return errs
}

func (s *Server) prompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt   map[string]node `json:"prompt"`
		ClientID string          `json:"client_id"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&body); err != nil || len(body.Prompt) == 0 {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"type": "no_prompt", "message": "No prompt provided", "details": "", "extra_info": map[string]any{}}, "node_errors": map[string]any{}})
		return
	}
	if errs := s.validate(body.Prompt); len(errs) > 0 {
		typ := "prompt_outputs_failed_validation"
		if _, ok := errs[""]; ok {
			typ = "prompt_no_outputs"
			delete(errs, "")
		}
		writeJSON(w, 400, map[string]any{"error": map[string]any{"type": typ, "message": "Prompt outputs failed validation", "details": "", "extra_info": map[string]any{}}, "node_errors": errs})
		return
	}
	id := randomID()
	stop := make(chan struct{})
	s.mu.Lock()
	s.queued++
	number := s.queued
	s.running[id] = stop
	var raw map[string]any
	b, _ := json.Marshal(body.Prompt)
	_ = json.Unmarshal(b, &raw)
	s.prompts = append(s.prompts, raw)
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"prompt_id": id, "number": number, "node_errors": map[string]any{}})
	go s.execute(id, number, body.ClientID, body.Prompt, stop)
}

// execute runs a validated graph: messages in ComfyUI's order, a real PNG
// out, a history entry.
func (s *Server) execute(id string, number int, client string, graph map[string]node, stop chan struct{}) {
	defer func() {
		s.mu.Lock()
		delete(s.running, id)
		s.mu.Unlock()
	}()
	data := func(kv ...any) map[string]any {
		m := map[string]any{"prompt_id": id, "timestamp": time.Now().UnixMilli()}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	s.send(client, "execution_start", data())
	s.send(client, "execution_cached", data("nodes", []string{}))
	order := topo(graph)
	var width, height int
	var seed int64
	var outputNode string
	var steps int
	for _, nid := range order {
		n := graph[nid]
		switch n.ClassType {
		case "EmptyLatentImage":
			width, height = num(n.Inputs["width"]), num(n.Inputs["height"])
		case "KSampler":
			seed, steps = int64(num(n.Inputs["seed"])), num(n.Inputs["steps"])
		case "SaveImage", "PreviewImage":
			outputNode = nid
		}
	}
	status := func(str string, msgs []any) {
		entry := map[string]any{"prompt": []any{number, id, graph, map[string]any{"client_id": client}, []string{outputNode}},
			"outputs": map[string]any{}, "status": map[string]any{"status_str": str, "completed": str == "success", "messages": msgs}, "meta": map[string]any{}}
		b, _ := json.Marshal(map[string]any{id: entry})
		s.mu.Lock()
		s.history[id] = b
		s.mu.Unlock()
	}
	for _, nid := range order {
		n := graph[nid]
		s.send(client, "executing", data("node", nid, "display_node", nid))
		if n.ClassType != "KSampler" {
			continue
		}
		if s.opts.FailWith != "" {
			s.send(client, "execution_error", data("node_id", nid, "node_type", n.ClassType, "executed", []string{},
				"exception_message", s.opts.FailWith, "exception_type", "RuntimeError", "traceback", []string{}, "current_inputs", map[string]any{}, "current_outputs", map[string]any{}))
			status("error", nil)
			return
		}
		for step := 1; step <= steps; step++ {
			s.send(client, "progress", data("value", step, "max", steps, "node", nid))
			if step == 1 && s.opts.Hold {
				select {
				case <-s.release:
				case <-stop:
					s.send(client, "execution_interrupted", data("node_id", nid, "node_type", n.ClassType, "executed", []string{}))
					status("error", nil)
					return
				}
			}
		}
	}
	img := render(width+s.opts.SizeOff, height, seed)
	name := fmt.Sprintf("ComfyUI_temp_%s_%05d_.png", id[:5], number)
	s.mu.Lock()
	s.files[name] = img
	s.mu.Unlock()
	images := []any{map[string]any{"filename": name, "subfolder": "", "type": "temp"}}
	s.send(client, "executed", data("node", outputNode, "display_node", outputNode, "output", map[string]any{"images": images}))
	entry := map[string]any{"prompt": []any{number, id, graph, map[string]any{"client_id": client}, []string{outputNode}},
		"outputs": map[string]any{outputNode: map[string]any{"images": images}},
		"status":  map[string]any{"status_str": "success", "completed": true, "messages": []any{}}, "meta": map[string]any{}}
	b, _ := json.Marshal(map[string]any{id: entry})
	s.mu.Lock()
	s.history[id] = b
	s.mu.Unlock()
	s.send(client, "executing", data("node", nil))
	s.send(client, "execution_success", data())
}

// topo orders a graph's nodes so that each comes after the nodes it links
// to (ties by id).
func topo(graph map[string]node) []string {
	var order []string
	done := map[string]bool{}
	var visit func(string)
	visit = func(id string) {
		if done[id] {
			return
		}
		done[id] = true
		n := graph[id]
		var deps []string
		for _, v := range n.Inputs {
			if l, ok := v.([]any); ok && len(l) == 2 {
				if from, ok := l[0].(string); ok {
					deps = append(deps, from)
				}
			}
		}
		slices.Sort(deps)
		for _, d := range deps {
			visit(d)
		}
		order = append(order, id)
	}
	ids := make([]string, 0, len(graph))
	for id := range graph {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		visit(id)
	}
	return order
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// render draws a deterministic pattern of width×height from seed.
func render(width, height int, seed int64) []byte {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for y := range height {
		for x := range width {
			img.Set(x, y, color.RGBA{R: uint8(x + int(seed)), G: uint8(y + int(seed>>8)), B: uint8((x ^ y) + int(seed>>16)), A: 255})
		}
	}
	var buf bytes.Buffer
	_ = png.Encode(&buf, img)
	return buf.Bytes()
}

func (s *Server) historyOf(w http.ResponseWriter, r *http.Request) {
	if s.opts.BadHistory {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`["not", "a", "history"]`))
		return
	}
	s.mu.Lock()
	b, ok := s.history[r.PathValue("id")]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		_, _ = w.Write([]byte("{}"))
		return
	}
	_, _ = w.Write(b)
}

func (s *Server) view(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	s.views++
	img, ok := s.files[q.Get("filename")]
	s.mu.Unlock()
	if !ok || q.Get("type") != "temp" || q.Get("subfolder") != "" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	if s.opts.ViewBytes > 0 {
		w.Header().Set("Content-Length", strconv.Itoa(s.opts.ViewBytes))
		_, _ = w.Write(make([]byte, s.opts.ViewBytes))
		return
	}
	_, _ = w.Write(img)
}

func (s *Server) interruptPrompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PromptID string `json:"prompt_id"`
	}
	_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body)
	s.mu.Lock()
	s.interrupt++
	for id, stop := range s.running {
		if body.PromptID == "" || body.PromptID == id {
			close(stop)
			delete(s.running, id)
		}
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Delete []string `json:"delete"`
		Clear  bool     `json:"clear"`
	}
	_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body)
	s.mu.Lock()
	s.deleted = append(s.deleted, body.Delete...)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// deleteHistory is POST /history: {"delete": [ids]} drops those prompts'
// entries, {"clear": true} every entry.
func (s *Server) deleteHistory(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Delete []string `json:"delete"`
		Clear  bool     `json:"clear"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for _, id := range body.Delete {
		delete(s.history, id)
	}
	if body.Clear {
		clear(s.history)
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// History is how many prompts the stand-in's history holds.
func (s *Server) History() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.history)
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
