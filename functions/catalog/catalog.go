// Package catalog is the list of models the network offers and their flat
// per-request prices. It is configuration: loaded from JSON, never compiled
// into the request path.
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-playground/validator/v10"
)

// Model is one offered model.
type Model struct {
	ID string `json:"id" validate:"required,max=128"`
	// Price is the flat price of one request, in credits (1 credit = $0.01).
	Price   int64    `json:"price" validate:"min=1,max=1000000"`
	Aliases []string `json:"aliases,omitempty" validate:"dive,required,max=128"`
	// OwnedBy is shown in /v1/models.
	OwnedBy string `json:"owned_by,omitempty"`
	// Note is shown in /v1/models (e.g. that a model is a random-weight
	// demo).
	Note string `json:"note,omitempty"`
	// KnownAnswers says the model answers simple factual questions right,
	// so canaries check it with known-answer questions; without it (a
	// random-weight test model) a canary's reply is compared with other
	// workers' replies.
	KnownAnswers bool `json:"known_answers,omitempty"`
	// Image makes the model an image model: it serves POST
	// /v1/images/generations (and no chat), at Price per image.
	Image *ImageSpec `json:"image,omitempty"`
	// Ollama is the Ollama model (name:tag) that serves the model, so that
	// `workerd setup` can pull it for a new worker; empty if none does.
	Ollama string `json:"ollama,omitempty" validate:"omitempty,max=256"`
	// MemoryMiB is the memory (GPU, or RAM on a CPU) the model needs at
	// its default context, in MiB; setup offers it only where it fits.
	MemoryMiB int64 `json:"memory_mib,omitempty" validate:"min=0,max=16777216"`
	// Ring makes the model a ring model: too big for one contributor, it
	// is served by a ring of workers each holding a layer range (SPEC
	// "Sharding", functions/rings). A ring model is a chat model.
	Ring *RingSpec `json:"ring,omitempty"`
}

// RingSpec is how a ring model is published and what rings of it the
// gateway forms.
type RingSpec struct {
	// BlobURL is where the model's shards are published, as `workerd
	// shard publish` writes them: BlobURL/manifest.json is the signed
	// manifest, BlobURL/model.json the signed model descriptor, and each
	// blob is BlobURL/<hex sha256>.
	BlobURL string `json:"blob_url" validate:"required,http_url,max=1024"`
	// MinStages and MaxStages bound the stages of a ring. At most 32:
	// each stage is paid a share of a job, and one completion credits
	// at most store.MaxShares of them.
	MinStages int `json:"min_stages" validate:"min=1,max=32"`
	MaxStages int `json:"max_stages" validate:"gtefield=MinStages,max=32"`
	// Standbys is how many standby members each stage gets.
	Standbys int `json:"standbys" validate:"min=0,max=8"`
	// ContextTokens is the context length every stage reserves KV cache
	// for, and the longest context a job of the model may need.
	ContextTokens int64 `json:"context_tokens" validate:"min=1,max=16777216"`
}

// ImageSpec is what an image model renders.
type ImageSpec struct {
	// Sizes are the sizes a request may ask for, "WIDTHxHEIGHT" in
	// pixels (each side 64 to 2048, a multiple of 8, as diffusion models'
	// latents need: the relay carries an image of 16 MiB at most,
	// relaymsg.MaxImageBytes, which a PNG of 2048×2048 fits); the first is
	// the default.
	Sizes []string `json:"sizes" validate:"required,min=1,max=16,dive,required,max=9"`
}

// DefaultSize is the size a request that names none gets.
func (s *ImageSpec) DefaultSize() string { return s.Sizes[0] }

// MaxImageSide is the longest side of an image in pixels.
const MaxImageSide = 2048

// ParseSize reads an image size, "WIDTHxHEIGHT" in pixels, each side 64 to
// MaxImageSide and a multiple of 8.
func ParseSize(size string) (width, height int, err error) {
	w, h, ok := strings.Cut(size, "x")
	if ok {
		width, err = strconv.Atoi(w)
		if err == nil {
			height, err = strconv.Atoi(h)
		}
	}
	if !ok || err != nil || strconv.Itoa(width) != w || strconv.Itoa(height) != h {
		return 0, 0, fmt.Errorf("image size %q is not WIDTHxHEIGHT, e.g. 1024x1024", size)
	}
	for _, side := range []int{width, height} {
		if side < 64 || side > MaxImageSide || side%8 != 0 {
			return 0, 0, fmt.Errorf("image size %q: each side must be 64 to %d pixels and a multiple of 8", size, MaxImageSide)
		}
	}
	return width, height, nil
}

// Default is the network's standard line-up (SPEC: "Models and flat
// per-request prices").
func Default() []Model {
	return []Model{
		{ID: "c0mpute-pro", Price: 10, KnownAnswers: true},
		{ID: "c0mpute-max", Price: 15, Aliases: []string{"c0mpute-max-supergemma"}, KnownAnswers: true},
		{ID: "c0mpute-max-think", Price: 20, KnownAnswers: true},
		{ID: "supergemma4-26b", Price: 15, KnownAnswers: true},
		{ID: "code", Price: 15, Aliases: []string{"devstral-24b", "c0mpute-code"}, KnownAnswers: true},
		{ID: "c0mpute-image", Price: 20, Image: &ImageSpec{Sizes: []string{"1024x1024", "768x768", "512x512", "1024x768", "768x1024"}}},
	}
}

// Catalog resolves model ids and aliases. It is safe for concurrent use; the
// dev runner adds models while serving.
type Catalog struct {
	mu     sync.RWMutex
	models []Model
	byName map[string]int
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// New builds a catalog; ids and aliases must be unique.
func New(models []Model) (*Catalog, error) {
	c := &Catalog{byName: map[string]int{}}
	for _, m := range models {
		if err := c.Add(m); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Load reads a JSON array of models; unknown fields and an empty list are
// errors.
func Load(r io.Reader) (*Catalog, error) {
	var models []Model
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&models); err != nil {
		return nil, fmt.Errorf("catalog: decode: %w", err)
	}
	if len(models) == 0 {
		return nil, errors.New("catalog: no models")
	}
	return New(models)
}

// FromSource is the catalog a deployment configures: source is the JSON
// array itself (it starts with "["), a path to a file holding it, or ""
// for Default.
func FromSource(source string) (*Catalog, error) {
	switch trimmed := strings.TrimSpace(source); {
	case trimmed == "":
		return New(Default())
	case strings.HasPrefix(trimmed, "["):
		return Load(strings.NewReader(trimmed))
	default:
		f, err := os.Open(source)
		if err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		defer f.Close()
		return Load(f)
	}
}

// Add offers one more model.
func (c *Catalog) Add(m Model) error {
	if err := validate.Struct(m); err != nil {
		return fmt.Errorf("catalog: model %q: %w", m.ID, err)
	}
	if m.Ring != nil && m.Image != nil {
		return fmt.Errorf("catalog: model %q: a ring model is a chat model: drop \"image\" or \"ring\"", m.ID)
	}
	if m.Image != nil {
		for _, size := range m.Image.Sizes {
			if _, _, err := ParseSize(size); err != nil {
				return fmt.Errorf("catalog: model %q: %w", m.ID, err)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range append([]string{m.ID}, m.Aliases...) {
		if _, dup := c.byName[name]; dup {
			return fmt.Errorf("catalog: %q is offered twice", name)
		}
	}
	c.models = append(c.models, m)
	for _, name := range append([]string{m.ID}, m.Aliases...) {
		c.byName[name] = len(c.models) - 1
	}
	return nil
}

// Resolve finds a model by id or alias.
func (c *Catalog) Resolve(name string) (Model, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	i, ok := c.byName[name]
	if !ok {
		return Model{}, false
	}
	return c.models[i], true
}

// Models lists the offered models in the order they were added.
func (c *Catalog) Models() []Model {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.models)
}

// IDs are the ids of Models, in their order.
func (c *Catalog) IDs() []string {
	var out []string
	for _, m := range c.Models() {
		out = append(out, m.ID)
	}
	return out
}
