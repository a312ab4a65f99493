package hardware

import (
	"os"
	"path/filepath"
	"testing"
)

// seed adds every recording under testdata/dir to f's corpus (beside the
// checked-in corpus under testdata/fuzz).
func seed(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// The parsers take a subprocess's bytes: whatever they are, a parser
// returns GPUs that make sense or an error, and never panics.

func FuzzParseNvidiaSMI(f *testing.F) {
	seed(f, "nvidia-smi")
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := ParseNvidiaSMI(b)
		if err == nil {
			sane(t, gpus)
		}
	})
}

func FuzzParseROCmSMI(f *testing.F) {
	seed(f, "rocm-smi")
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := ParseROCmSMI(b)
		if err == nil {
			sane(t, gpus)
		}
	})
}

func FuzzParseSystemProfiler(f *testing.F) {
	seed(f, "system_profiler")
	f.Fuzz(func(t *testing.T, b []byte) {
		if name, err := ParseSystemProfiler(b); err == nil && name == "" {
			t.Error("no name and no error")
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	seed(f, "meminfo")
	f.Fuzz(func(t *testing.T, b []byte) {
		total, avail, err := ParseMeminfo(b)
		if err == nil && (total <= 0 || avail < 0) {
			t.Errorf("total %d, available %d", total, avail)
		}
		if _, err := ParseSysctlMemsize(b); err != nil && err.Error() == "" {
			t.Error("empty error")
		}
	})
}

func sane(t *testing.T, gpus []GPU) {
	if len(gpus) == 0 || len(gpus) > maxGPUs {
		t.Fatalf("%d GPUs", len(gpus))
	}
	for _, g := range gpus {
		if g.Name == "" || g.TotalMiB < 0 || g.FreeMiB < 0 || g.FreeMiB > g.TotalMiB {
			t.Errorf("%+v", g)
		}
	}
}
