package catalog

import (
	"strings"
	"testing"
)

// TestOllamaFields: a catalogue JSON names the Ollama model that serves an
// entry and the memory it needs (workerd setup reads them from
// /v1/models); a negative memory is refused.
func TestOllamaFields(t *testing.T) {
	c, err := Load(strings.NewReader(`[{"id": "c0mpute-pro", "price": 10, "ollama": "qwen3:8b", "memory_mib": 6144}]`))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Resolve("c0mpute-pro")
	if !ok || m.Ollama != "qwen3:8b" || m.MemoryMiB != 6144 {
		t.Errorf("%+v %v", m, ok)
	}
	if _, err := Load(strings.NewReader(`[{"id": "x", "price": 10, "ollama": "x:1b", "memory_mib": -1}]`)); err == nil {
		t.Error("negative memory_mib accepted")
	}
}
