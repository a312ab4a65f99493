package expf

import "testing"

// paths lists the implementations on this machine: the Go path, and the
// AVX-512 one where the CPU has it; each setup restores the default when
// the test ends.
func paths(t testing.TB) []path {
	ps := []path{{"go", func(t testing.TB) { setAVX512(t, false) }}}
	if useAVX512 {
		ps = append(ps, path{"avx512", func(t testing.TB) { setAVX512(t, true) }})
	}
	return ps
}

func setAVX512(t testing.TB, on bool) {
	old := useAVX512
	useAVX512 = on
	t.Cleanup(func() { useAVX512 = old })
}
