package setup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-playground/validator/v10"
)

// maxGatewayBody bounds a /v1/stats or /v1/models answer: a catalogue of
// hundreds of models is tens of kilobytes.
const maxGatewayBody = 4 << 20

// Stats is what setup reads of GET /v1/stats (functions/api statsJSON).
type Stats struct {
	WorkersOnline  int64            `json:"workers_online" validate:"min=0,max=1000000000"`
	WorkersByModel map[string]int64 `json:"workers_by_model" validate:"max=10000,dive,keys,max=256,endkeys,min=0,max=1000000000"`
	QueueDepth     int64            `json:"queue_depth" validate:"min=0,max=1000000000"`
	QueueByModel   map[string]int64 `json:"queue_by_model" validate:"max=10000,dive,keys,max=256,endkeys,min=0,max=1000000000"`
}

// CatalogModel is what setup reads of one GET /v1/models entry
// (functions/api modelJSON, from catalog.Model).
type CatalogModel struct {
	ID string `json:"id" validate:"required,max=128"`
	// Ollama is the Ollama model that serves it; empty if none does.
	Ollama string `json:"ollama" validate:"max=256"`
	// MemoryMiB is what it needs at its default context; 0 if unknown.
	MemoryMiB int64 `json:"memory_mib" validate:"min=0,max=16777216"`
}

type modelList struct {
	Data []CatalogModel `json:"data" validate:"max=1000,dive"`
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// Gateway reads the network's public figures.
type Gateway struct {
	// Base is the API base URL, e.g. https://api.example/v1.
	Base string
	HC   *http.Client
}

// Stats gets GET <base>/stats.
func (g Gateway) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	if err := g.get(ctx, "/stats", &s); err != nil {
		return Stats{}, err
	}
	return s, nil
}

// Models gets GET <base>/models.
func (g Gateway) Models(ctx context.Context) ([]CatalogModel, error) {
	var l modelList
	if err := g.get(ctx, "/models", &l); err != nil {
		return nil, err
	}
	return l.Data, nil
}

func (g Gateway) get(ctx context.Context, path string, out any) error {
	u := strings.TrimRight(g.Base, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := g.HC.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w (is --api-url right?)", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxGatewayBody+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(b) > maxGatewayBody {
		return fmt.Errorf("GET %s: the answer is over %d bytes", u, maxGatewayBody)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d (is --api-url the gateway's …/v1 URL?)", u, resp.StatusCode)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("GET %s: not the gateway's JSON: %v", u, err)
	}
	if err := validate.Struct(out); err != nil {
		return fmt.Errorf("GET %s: the answer is out of bounds: %v", u, err)
	}
	return nil
}

// DeriveAPIURL guesses the gateway's API URL from the relay's, for a
// network that names its hosts relay.<domain> and api.<domain>:
// wss://relay.example.net/… gives https://api.example.net/v1. Any other
// relay URL gives "" (the API URL must then be set).
func DeriveAPIURL(relay string) string {
	u, err := url.Parse(relay)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	rest, ok := strings.CutPrefix(u.Hostname(), "relay.")
	if !ok || rest == "" {
		return ""
	}
	scheme := "https"
	if u.Scheme == "ws" {
		scheme = "http"
	}
	host := "api." + rest
	if p := u.Port(); p != "" {
		host += ":" + p
	}
	return scheme + "://" + host + "/v1"
}
