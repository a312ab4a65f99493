package setup

import (
	"bytes"
	"testing"
)

// FuzzReadProgress feeds what an Ollama (or anything on its port) may
// stream to a pull or a create into the progress reader: an error or
// progress lines that make sense, never a panic.
func FuzzReadProgress(f *testing.F) {
	for _, seed := range []string{
		"{\"status\":\"pulling manifest\"}\n{\"status\":\"pulling abc\",\"digest\":\"sha256:abc\",\"total\":100,\"completed\":50}\n{\"status\":\"success\"}\n",
		"{\"error\":\"pull model manifest: file does not exist\"}\n",
		"{\"status\":\"x\",\"total\":10,\"completed\":11}\n",
		"not json\n", "", "\n\n{\"status\":\"success\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		_ = readProgress(bytes.NewReader(stream), "/api/pull", func(p Progress) {
			if p.Total < 0 || p.Completed < 0 || (p.Total > 0 && p.Completed > p.Total) {
				t.Fatalf("progress %d of %d passed on", p.Completed, p.Total)
			}
		})
	})
}
