package comfyui

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// Placeholders a workflow's input values may be, whole: each is replaced by
// the job's value (a number for width, height and seed, a string for the
// others). A placeholder inside a longer string is not replaced, so a
// prompt can never be spliced into anything but the input it is for.
const (
	PlaceholderPrompt         = "{{prompt}}"
	PlaceholderNegativePrompt = "{{negative_prompt}}"
	PlaceholderWidth          = "{{width}}"
	PlaceholderHeight         = "{{height}}"
	PlaceholderSeed           = "{{seed}}"
	PlaceholderCheckpoint     = "{{checkpoint}}"
)

// requiredPlaceholders must each appear in a workflow: without them the job
// could not be the one asked for.
var requiredPlaceholders = []string{PlaceholderPrompt, PlaceholderWidth, PlaceholderHeight, PlaceholderCheckpoint}

// outputClasses are the nodes whose images a job returns. PreviewImage
// (the default workflow's) writes to ComfyUI's temp folder, which ComfyUI
// empties on start, rather than keep every user's image in its output
// folder; SaveImage is accepted for workflows that want it.
var outputClasses = []string{"PreviewImage", "SaveImage"}

//go:embed workflow_default.json
var defaultWorkflow []byte

// maxWorkflowBytes bounds a workflow file.
const maxWorkflowBytes = 1 << 20

// maxNodes bounds a workflow's nodes.
const maxNodes = 1000

// node is one node of an API-format workflow.
type node struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
	// Meta is ComfyUI's own annotation (the node's title); kept as is.
	Meta json.RawMessage `json:"_meta,omitempty"`
}

// Workflow is a text-to-image graph in ComfyUI's API format ("Save (API)"
// in ComfyUI's menu), with placeholders for what each job sets.
type Workflow struct {
	nodes map[string]node
	// output is the id of the node whose images are the job's.
	output string
}

// DefaultWorkflow is the built-in text-to-image graph:
// CheckpointLoaderSimple → CLIPTextEncode (prompt, negative prompt) →
// EmptyLatentImage → KSampler → VAEDecode → PreviewImage.
func DefaultWorkflow() *Workflow {
	w, err := ParseWorkflow(defaultWorkflow)
	if err != nil {
		panic("comfyui: the embedded workflow is invalid: " + err.Error())
	}
	return w
}

// LoadWorkflow reads and checks a workflow file.
func LoadWorkflow(path string) (*Workflow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("comfyui workflow: %w", err)
	}
	defer f.Close()
	b, err := readBounded(f, maxWorkflowBytes, "workflow file")
	if err != nil {
		return nil, fmt.Errorf("comfyui workflow %s: %w", path, err)
	}
	w, err := ParseWorkflow(b)
	if err != nil {
		return nil, fmt.Errorf("comfyui workflow %s: %w", path, err)
	}
	return w, nil
}

// ParseWorkflow checks an API-format workflow: an object of nodes, each
// with a class_type and inputs; every link to an existing node; the
// placeholders prompt, width, height and checkpoint each present; exactly
// one PreviewImage or SaveImage node.
func ParseWorkflow(b []byte) (*Workflow, error) {
	var nodes map[string]node
	if err := json.Unmarshal(b, &nodes); err != nil {
		return nil, fmt.Errorf("not an API-format workflow (export it with \"Save (API)\"): %w", err)
	}
	if len(nodes) == 0 || len(nodes) > maxNodes {
		return nil, fmt.Errorf("a workflow has 1 to %d nodes, not %d", maxNodes, len(nodes))
	}
	w := &Workflow{nodes: nodes}
	seen := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[id]
		if n.ClassType == "" {
			return nil, fmt.Errorf("node %q has no class_type (is this the UI format? export with \"Save (API)\")", id)
		}
		if slices.Contains(outputClasses, n.ClassType) {
			if w.output != "" {
				return nil, fmt.Errorf("nodes %q and %q both output images: keep one %s", w.output, id, strings.Join(outputClasses, " or "))
			}
			w.output = id
		}
		for name, v := range n.Inputs {
			switch v := v.(type) {
			case string:
				if strings.HasPrefix(v, "{{") && strings.HasSuffix(v, "}}") {
					if !slices.Contains(allPlaceholders, v) {
						return nil, fmt.Errorf("node %q input %q: unknown placeholder %s (the placeholders are %s)", id, name, v, strings.Join(allPlaceholders, ", "))
					}
					seen[v]++
				}
			case []any:
				if len(v) == 2 {
					if from, ok := v[0].(string); ok {
						if _, ok := nodes[from]; !ok {
							return nil, fmt.Errorf("node %q input %q links to node %q, which is not in the workflow", id, name, from)
						}
					}
				}
			}
		}
	}
	if w.output == "" {
		return nil, fmt.Errorf("no node outputs the image: end the workflow in a %s node", strings.Join(outputClasses, " or "))
	}
	var missing []string
	for _, p := range requiredPlaceholders {
		if seen[p] == 0 {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the workflow lacks the placeholders %s: put each as the whole value of the input it sets", strings.Join(missing, ", "))
	}
	return w, nil
}

var allPlaceholders = []string{PlaceholderPrompt, PlaceholderNegativePrompt, PlaceholderWidth, PlaceholderHeight, PlaceholderSeed, PlaceholderCheckpoint}

// values is what one job sets.
type values struct {
	prompt, negative, checkpoint string
	width, height                int
	seed                         uint64
}

// graph is the workflow with the job's values in place of the placeholders.
func (w *Workflow) graph(v values) map[string]node {
	out := make(map[string]node, len(w.nodes))
	for id, n := range w.nodes {
		inputs := make(map[string]any, len(n.Inputs))
		for name, in := range n.Inputs {
			if s, ok := in.(string); ok {
				switch s {
				case PlaceholderPrompt:
					in = v.prompt
				case PlaceholderNegativePrompt:
					in = v.negative
				case PlaceholderCheckpoint:
					in = v.checkpoint
				case PlaceholderWidth:
					in = v.width
				case PlaceholderHeight:
					in = v.height
				case PlaceholderSeed:
					in = v.seed
				}
			}
			inputs[name] = in
		}
		out[id] = node{ClassType: n.ClassType, Inputs: inputs, Meta: n.Meta}
	}
	return out
}

// errTooLarge is a read past its bound.
var errTooLarge = errors.New("larger than the limit")
