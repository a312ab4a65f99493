package hardware

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseNvidiaSMI(t *testing.T) {
	for _, tc := range []struct {
		file    string
		want    []GPU
		wantErr string
	}{
		{file: "one-gpu.csv", want: []GPU{{0, "NVIDIA H100 80GB HBM3", 81559, 81007, "550.54.15"}}},
		{file: "two-gpus-one-busy.csv", want: []GPU{
			{0, "NVIDIA GeForce RTX 4090", 24564, 2103, "550.54.14"},
			{1, "NVIDIA GeForce RTX 3090", 24576, 24252, "550.54.14"}}},
		{file: "four-gpus.csv", want: []GPU{
			{0, "NVIDIA A100-SXM4-80GB", 81920, 81050, "535.129.03"},
			{1, "NVIDIA A100-SXM4-80GB", 81920, 81050, "535.129.03"},
			{2, "NVIDIA A100-SXM4-80GB", 81920, 81050, "535.129.03"},
			{3, "NVIDIA A100-SXM4-80GB", 81920, 12345, "535.129.03"}}},
		{file: "not-supported.csv", wantErr: `nvidia-smi line 1 (GPU 0): memory.total is "[N/A]", not a size in MiB`},
		{file: "no-driver.txt", wantErr: `nvidia-smi line 1: 1 fields, want 5`},
		{file: "empty.csv", wantErr: "nvidia-smi listed no GPU"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := ParseNvidiaSMI(read(t, "nvidia-smi/"+tc.file))
			check(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestParseNvidiaSMIInline(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
		want        []GPU
	}{
		{in: "0, Some, Odd, Name, 8192, 8000, 1.2\r\n", want: []GPU{{0, "Some, Odd, Name", 8192, 8000, "1.2"}}},
		{in: "x, GPU, 1, 1, 1", wantErr: `index "x" is not a number`},
		{in: "0, GPU, 10, 20, 1", wantErr: "20 MiB free of 10"},
		{in: "0, , 10, 5, 1", wantErr: "no name"},
		{in: "0, GPU, -1, 0, 1", wantErr: `memory.total is "-1"`},
	} {
		got, err := ParseNvidiaSMI([]byte(tc.in))
		check(t, got, err, tc.want, tc.wantErr)
	}
}

func TestParseROCmSMI(t *testing.T) {
	for _, tc := range []struct {
		file    string
		want    []GPU
		wantErr string
	}{
		{file: "one-gpu.json", want: []GPU{{0, "Radeon RX 7900 XT", 20464, 20437, ""}}},
		{file: "two-gpus-one-busy.json", want: []GPU{
			{0, "Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]", 16368, 7124, ""},
			{1, "Raphael", 64, 39, ""}}},
		{file: "rocm6-device-name.json", want: []GPU{{0, "Phoenix3", 512, 66, ""}}},
		{file: "no-vram.json", wantErr: `rocm-smi card0: "VRAM Total Memory (B)" is missing (rocm-smi needs --showmeminfo vram)`},
		{file: "truncated.json", wantErr: "rocm-smi: not the JSON --json prints: unexpected end of JSON input"},
		{file: "no-gpu.txt", wantErr: "rocm-smi: not the JSON --json prints"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := ParseROCmSMI(read(t, "rocm-smi/"+tc.file))
			check(t, got, err, tc.want, tc.wantErr)
		})
	}
	_, err := ParseROCmSMI([]byte(`{}`))
	check[[]GPU](t, nil, err, nil, "rocm-smi listed no card")
	_, err = ParseROCmSMI([]byte(`{"card0":{"VRAM Total Memory (B)":"10","VRAM Total Used Memory (B)":"11"}}`))
	check[[]GPU](t, nil, err, nil, "11 bytes used of 10")
}

func TestParseApple(t *testing.T) {
	name, err := ParseSystemProfiler(read(t, "system_profiler/m2-pro.json"))
	check(t, name, err, "Apple M2 Pro (19-core GPU)", "")
	_, err = ParseSystemProfiler(read(t, "system_profiler/intel-mac.json"))
	check(t, "", err, "", "system_profiler: no Apple-silicon GPU (found Intel UHD Graphics 630)")
	_, err = ParseSystemProfiler([]byte(`{"SPDisplaysDataType":[]}`))
	check(t, "", err, "", "system_profiler listed no graphics device")
	n, err := ParseSysctlMemsize(read(t, "system_profiler/sysctl-memsize.txt"))
	check(t, n, err, 32<<30, "")
	_, err = ParseSysctlMemsize([]byte("hw.memsize: 1\n"))
	check(t, 0, err, 0, `sysctl hw.memsize: "hw.memsize: 1" is not a size in bytes`)
}

func TestParseMeminfo(t *testing.T) {
	total, avail, err := ParseMeminfo(read(t, "meminfo/linux.txt"))
	check(t, [2]int64{total, avail}, err, [2]int64{65748940 * 1024, 48203516 * 1024}, "")
	_, _, err = ParseMeminfo([]byte("MemFree: 1 kB\n"))
	check(t, 0, err, 0, "/proc/meminfo has no MemTotal")
	_, _, err = ParseMeminfo([]byte("MemTotal: 12 MB\n"))
	check(t, 0, err, 0, `/proc/meminfo: MemTotal is "12 MB", want "<n> kB"`)
}

func check[T any](t *testing.T, got T, err error, want T, wantErr string) {
	t.Helper()
	switch {
	case wantErr != "" && err == nil:
		t.Errorf("got %v, want error %q", got, wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Errorf("error %q, want it to contain %q", err, wantErr)
	case wantErr == "" && err != nil:
		t.Errorf("error %v", err)
	case wantErr == "" && !reflect.DeepEqual(got, want):
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// fakeRunner answers commands from recordings; a tool it has none for is
// not installed.
type fakeRunner map[string]string

func (f fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	out, ok := f[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	if strings.HasPrefix(out, "ERR ") {
		return nil, errors.New(strings.TrimPrefix(out, "ERR "))
	}
	return []byte(out), nil
}

func TestDetect(t *testing.T) {
	meminfo := func(string) ([]byte, error) { return read(t, "meminfo/linux.txt"), nil }
	linux := System{GOOS: "linux", NumCPU: 16, ReadFile: meminfo}
	for _, tc := range []struct {
		name              string
		run               fakeRunner
		sys               System
		kind              Kind
		gpus              int
		total, free       int64
		notes, wantString string
	}{
		{name: "nvidia", run: fakeRunner{"nvidia-smi": string(read(t, "nvidia-smi/two-gpus-one-busy.csv"))}, sys: linux,
			kind: NVIDIA, gpus: 2, total: 24564 + 24576, free: 2103 + 24252,
			wantString: "GPU 0: NVIDIA GeForce RTX 4090, 24.0 GiB (2.1 GiB free), driver 550.54.14\nGPU 1: NVIDIA GeForce RTX 3090, 24.0 GiB (23.7 GiB free), driver 550.54.14"},
		{name: "amd after a failing nvidia-smi", run: fakeRunner{"nvidia-smi": "ERR exit status 9: NVIDIA-SMI has failed",
			"rocm-smi": string(read(t, "rocm-smi/one-gpu.json"))}, sys: linux,
			kind: AMD, gpus: 1, total: 20464, free: 20437, notes: "nvidia-smi: exit status 9: NVIDIA-SMI has failed"},
		{name: "apple", run: fakeRunner{"sysctl": "34359738368\n", "system_profiler": string(read(t, "system_profiler/m2-pro.json"))},
			sys: System{GOOS: "darwin", NumCPU: 12}, kind: Apple, gpus: 1, total: 32 * 1024 * 2 / 3, free: 32 * 1024 * 2 / 3,
			wantString: "Apple M2 Pro (19-core GPU): 32.0 GiB unified memory, 21.3 GiB usable by the GPU"},
		{name: "intel mac", run: fakeRunner{"sysctl": "17179869184\n", "system_profiler": string(read(t, "system_profiler/intel-mac.json"))},
			sys: System{GOOS: "darwin", NumCPU: 8}, kind: CPU, total: 16384, free: 16384, notes: "no Apple-silicon GPU"},
		{name: "cpu", run: fakeRunner{}, sys: linux, kind: CPU, total: 65748940 / 1024, free: 48203516 / 1024,
			wantString: "CPU only: 16 CPUs, 62.7 GiB RAM (46.0 GiB available)"},
		{name: "unreadable nvidia-smi", run: fakeRunner{"nvidia-smi": "garbage"}, sys: linux, kind: CPU,
			total: 65748940 / 1024, free: 48203516 / 1024, notes: "nvidia-smi: nvidia-smi line 1: 1 fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Detect(context.Background(), tc.run, tc.sys)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Kind != tc.kind || len(rep.GPUs) != tc.gpus || rep.TotalMiB() != tc.total || rep.FreeMiB() != tc.free {
				t.Errorf("kind %s, %d GPUs, %d/%d MiB; want %s, %d, %d/%d", rep.Kind, len(rep.GPUs), rep.FreeMiB(), rep.TotalMiB(),
					tc.kind, tc.gpus, tc.free, tc.total)
			}
			if notes := strings.Join(rep.Notes, "\n"); !strings.Contains(notes, tc.notes) || (tc.notes == "" && notes != "") {
				t.Errorf("notes %q, want %q", notes, tc.notes)
			}
			if tc.wantString != "" && rep.String() != tc.wantString {
				t.Errorf("String() =\n%s\nwant\n%s", rep.String(), tc.wantString)
			}
		})
	}
}

// TestExec runs real commands: the output bound and a missing program.
func TestExec(t *testing.T) {
	ctx := context.Background()
	if _, err := (Exec{}).Run(ctx, "c0mpute-no-such-tool"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tool: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	out, err := (Exec{}).Run(ctx, "sh", "-c", "echo hi")
	if err != nil || string(out) != "hi\n" {
		t.Errorf("echo: %q, %v", out, err)
	}
	if _, err := (Exec{MaxOutput: 10}).Run(ctx, "sh", "-c", "echo 0123456789abcdef"); err == nil || !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Errorf("over the bound: %v", err)
	}
	if _, err := (Exec{}).Run(ctx, "sh", "-c", "echo broken; exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3: broken") {
		t.Errorf("failing: %v", err)
	}
}
