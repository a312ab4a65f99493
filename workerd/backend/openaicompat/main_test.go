package openaicompat

import (
	"os"
	"testing"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

const tinyModel = "tiny:latest"

// realOllama returns the shared real Ollama server with the generated
// model created in it.
func realOllama(t *testing.T) *ollamatest.Server {
	t.Helper()
	return ollamatest.TinyModel(t, tinyModel, testmodel.Options{Seed: 1})
}

func ptr[T any](v T) *T { return &v }
