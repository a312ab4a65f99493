// Package hardware finds what a machine can run models on: NVIDIA GPUs
// (nvidia-smi), AMD GPUs (rocm-smi), Apple silicon's unified memory
// (system_profiler and sysctl), or else its CPUs and RAM.
//
// The tools run through a Runner, with a timeout and a bound on what they
// may print; their output is read by pure functions (Parse…), which are
// tested against recorded outputs under testdata/ and fuzzed. A parser
// never panics: output it cannot read is an error that names the tool.
package hardware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// Kind is what models would run on.
type Kind string

// Kinds.
const (
	NVIDIA Kind = "nvidia"
	AMD    Kind = "amd"
	Apple  Kind = "apple"
	CPU    Kind = "cpu"
)

// MiB is a mebibyte, the unit every figure here is in.
const MiB = 1 << 20

// GPU is one accelerator.
type GPU struct {
	Index int
	Name  string
	// TotalMiB and FreeMiB are its memory; free is less than total when
	// something (a desktop, another model) already uses it.
	TotalMiB int64
	FreeMiB  int64
	// Driver is the driver version, where the tool reports one.
	Driver string
}

// Report is what Detect found.
type Report struct {
	Kind Kind
	// GPUs are the accelerators of Kind (none for CPU; for Apple, the one
	// integrated GPU, whose memory is the share of unified memory the GPU
	// may use).
	GPUs []GPU
	// CPUs is the number of logical CPUs.
	CPUs int
	// RAMTotalMiB and RAMAvailableMiB are system memory (available: what
	// the kernel can give without swapping; 0 where unknown).
	RAMTotalMiB     int64
	RAMAvailableMiB int64
	// Notes say what was tried and did not work (a tool that failed), so
	// that a user whose GPU was missed learns why.
	Notes []string
}

// TotalMiB is the memory models can be placed in: every GPU's together
// (Ollama splits a model across GPUs), or RAM on a CPU-only machine.
func (r Report) TotalMiB() int64 {
	if len(r.GPUs) == 0 {
		return r.RAMTotalMiB
	}
	var n int64
	for _, g := range r.GPUs {
		n += g.TotalMiB
	}
	return n
}

// FreeMiB is the part of TotalMiB nothing uses now.
func (r Report) FreeMiB() int64 {
	if len(r.GPUs) == 0 {
		if r.RAMAvailableMiB > 0 {
			return r.RAMAvailableMiB
		}
		return r.RAMTotalMiB
	}
	var n int64
	for _, g := range r.GPUs {
		n += g.FreeMiB
	}
	return n
}

// String is the report in one line per device, for people.
func (r Report) String() string {
	var b strings.Builder
	switch r.Kind {
	case CPU:
		fmt.Fprintf(&b, "CPU only: %d CPUs, %s RAM (%s available)", r.CPUs, GiB(r.RAMTotalMiB), GiB(r.RAMAvailableMiB))
	case Apple:
		g := r.GPUs[0]
		fmt.Fprintf(&b, "%s: %s unified memory, %s usable by the GPU", g.Name, GiB(r.RAMTotalMiB), GiB(g.TotalMiB))
	default:
		for i, g := range r.GPUs {
			if i > 0 {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "GPU %d: %s, %s (%s free)", g.Index, g.Name, GiB(g.TotalMiB), GiB(g.FreeMiB))
			if g.Driver != "" {
				fmt.Fprintf(&b, ", driver %s", g.Driver)
			}
		}
	}
	return b.String()
}

// GiB formats a size in MiB for people: GiB with one decimal, or MiB
// under 1 GiB.
func GiB(mib int64) string {
	if mib < 1024 {
		return fmt.Sprintf("%d MiB", mib)
	}
	return fmt.Sprintf("%.1f GiB", float64(mib)/1024)
}

// Runner runs a command and returns its standard output.
type Runner interface {
	// Run runs name with args. A missing program is an error that
	// errors.Is ErrNotFound.
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ErrNotFound is a tool that is not installed.
var ErrNotFound = errors.New("not installed")

// Exec runs commands on this machine.
type Exec struct {
	// Timeout bounds one command (default DefaultTimeout).
	Timeout time.Duration
	// MaxOutput bounds what one command may print (default
	// DefaultMaxOutput); more is an error.
	MaxOutput int64
}

// Defaults for Exec. nvidia-smi answers in well under a second once the
// driver is loaded, but its first call on a machine where persistence mode
// is off initialises every GPU, which takes seconds; system_profiler is
// slow too. 20 s covers both without hanging setup on a wedged driver.
// 1 MiB is hundreds of times what the queries print on a 16-GPU machine.
const (
	DefaultTimeout   = 20 * time.Second
	DefaultMaxOutput = 1 << 20
)

// Run runs the command with the timeout and output bound.
func (e Exec) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	timeout, max := e.Timeout, e.MaxOutput
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if max <= 0 {
		max = DefaultMaxOutput
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	out := &boundedBuffer{max: max}
	stderr := &boundedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, stderr
	err = cmd.Run()
	switch {
	case out.over:
		return nil, fmt.Errorf("%s printed more than %d bytes", name, max)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s did not finish within %v", name, timeout)
	case err != nil:
		// nvidia-smi writes its failures to standard output.
		msg := strings.TrimSpace(stderr.String() + " " + out.String())
		if msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", name, err, firstLine(msg))
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out.Bytes(), nil
}

// boundedBuffer keeps at most max bytes and records that more came.
type boundedBuffer struct {
	strings.Builder
	max  int64
	over bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if int64(b.Len()+len(p)) > b.max {
		b.over = true
		return 0, io.ErrShortWrite
	}
	return b.Builder.Write(p)
}

func (b *boundedBuffer) Bytes() []byte { return []byte(b.String()) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// System is what Detect reads besides commands.
type System struct {
	// GOOS is runtime.GOOS.
	GOOS string
	// NumCPU is runtime.NumCPU().
	NumCPU int
	// ReadFile reads /proc/meminfo on Linux (os.ReadFile).
	ReadFile func(string) ([]byte, error)
}

// Queries, as Detect runs them.
var (
	NvidiaSMIArgs      = []string{"--query-gpu=index,name,memory.total,memory.free,driver_version", "--format=csv,noheader,nounits"}
	ROCmSMIArgs        = []string{"--showproductname", "--showmeminfo", "vram", "--json"}
	SystemProfilerArgs = []string{"SPDisplaysDataType", "-json"}
	SysctlMemsizeArgs  = []string{"-n", "hw.memsize"}
)

// Detect finds the machine's accelerators: NVIDIA first, then AMD, then
// Apple silicon; with none, the CPUs. A tool that is present but fails is
// noted in the report, and detection goes on to the next.
func Detect(ctx context.Context, r Runner, sys System) (Report, error) {
	rep := Report{Kind: CPU, CPUs: sys.NumCPU}
	note := func(tool string, err error) {
		if !errors.Is(err, ErrNotFound) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", tool, err))
		}
	}
	if sys.GOOS == "darwin" {
		out, err := r.Run(ctx, "sysctl", SysctlMemsizeArgs...)
		if err != nil {
			return rep, fmt.Errorf("read the memory size: %w", err)
		}
		total, err := ParseSysctlMemsize(out)
		if err != nil {
			return rep, err
		}
		rep.RAMTotalMiB = total / MiB
	} else if sys.ReadFile != nil {
		if b, err := sys.ReadFile("/proc/meminfo"); err == nil {
			total, avail, err := ParseMeminfo(b)
			if err != nil {
				return rep, err
			}
			rep.RAMTotalMiB, rep.RAMAvailableMiB = total/MiB, avail/MiB
		} else {
			rep.Notes = append(rep.Notes, fmt.Sprintf("memory size unknown: %v", err))
		}
	}

	if out, err := r.Run(ctx, "nvidia-smi", NvidiaSMIArgs...); err == nil {
		gpus, err := ParseNvidiaSMI(out)
		if err == nil {
			rep.Kind, rep.GPUs = NVIDIA, gpus
			return rep, nil
		}
		note("nvidia-smi", err)
	} else {
		note("nvidia-smi", err)
	}
	if out, err := r.Run(ctx, "rocm-smi", ROCmSMIArgs...); err == nil {
		gpus, err := ParseROCmSMI(out)
		if err == nil {
			rep.Kind, rep.GPUs = AMD, gpus
			return rep, nil
		}
		note("rocm-smi", err)
	} else {
		note("rocm-smi", err)
	}
	if sys.GOOS == "darwin" {
		out, err := r.Run(ctx, "system_profiler", SystemProfilerArgs...)
		if err == nil {
			var name string
			if name, err = ParseSystemProfiler(out); err == nil {
				usable := MetalWorkingSetMiB(rep.RAMTotalMiB)
				rep.Kind = Apple
				rep.GPUs = []GPU{{Name: name, TotalMiB: usable, FreeMiB: usable}}
				return rep, nil
			}
		}
		note("system_profiler", err)
	}
	return rep, nil
}

// MetalWorkingSetMiB is how much of unified memory macOS lets the GPU
// wire by default: Metal's recommendedMaxWorkingSetSize is about two
// thirds of memory up to 36 GiB and three quarters above (what llama.cpp
// and Ollama observe and use as the GPU's memory on Apple silicon).
func MetalWorkingSetMiB(totalMiB int64) int64 {
	if totalMiB > 36*1024 {
		return totalMiB * 3 / 4
	}
	return totalMiB * 2 / 3
}
