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
