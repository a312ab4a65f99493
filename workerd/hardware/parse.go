package hardware

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxGPUs bounds how many devices a tool's output may list: more than any
// machine has, so that malformed output cannot make a huge report.
const maxGPUs = 64

// ParseNvidiaSMI reads the output of
//
//	nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version --format=csv,noheader,nounits
//
// The format is NVIDIA's (nvidia-smi(1), "--query-gpu" and "--format";
// `nvidia-smi --help-query-gpu` lists the fields): one line per GPU, the
// queried fields in order separated by ", ", memory in MiB without the unit
// under nounits, and "[N/A]" or "[Not Supported]" for a field the GPU does
// not report. Names are not quoted; the index leads and three fields
// follow the name, so a name holding ", " is still read whole.
func ParseNvidiaSMI(out []byte) ([]GPU, error) {
	var gpus []GPU
	for n, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 5 {
			return nil, fmt.Errorf("nvidia-smi line %d: %d fields, want 5 (index, name, memory.total, memory.free, driver_version): %q", n+1, len(f), clip(line))
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		last := len(f) - 3
		g := GPU{Name: strings.Join(f[1:last], ", "), Driver: f[len(f)-1]}
		var err error
		if g.Index, err = strconv.Atoi(f[0]); err != nil || g.Index < 0 {
			return nil, fmt.Errorf("nvidia-smi line %d: index %q is not a number", n+1, clip(f[0]))
		}
		if g.TotalMiB, err = mib(f[last]); err != nil {
			return nil, fmt.Errorf("nvidia-smi line %d (GPU %d): memory.total %w", n+1, g.Index, err)
		}
		if g.FreeMiB, err = mib(f[last+1]); err != nil {
			return nil, fmt.Errorf("nvidia-smi line %d (GPU %d): memory.free %w", n+1, g.Index, err)
		}
		if g.FreeMiB > g.TotalMiB {
			return nil, fmt.Errorf("nvidia-smi line %d (GPU %d): %d MiB free of %d", n+1, g.Index, g.FreeMiB, g.TotalMiB)
		}
		if g.Name == "" {
			return nil, fmt.Errorf("nvidia-smi line %d (GPU %d): no name", n+1, g.Index)
		}
		if len(gpus) == maxGPUs {
			return nil, fmt.Errorf("nvidia-smi lists more than %d GPUs", maxGPUs)
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		return nil, errors.New("nvidia-smi listed no GPU")
	}
	return gpus, nil
}

// mib reads a whole number of MiB as nvidia-smi prints it under nounits.
func mib(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > 1<<40 {
		return 0, fmt.Errorf("is %q, not a size in MiB", clip(s))
	}
	return v, nil
}

// ParseROCmSMI reads the output of
//
//	rocm-smi --showproductname --showmeminfo vram --json
//
// The format is ROCm's (rocm-smi, the ROCm SMI CLI in ROCm/rocm_smi_lib,
// python_smi_tools/rocm_smi.py; its --json mode prints one object whose
// keys are "card0", "card1", … and whose values map the same labels the
// table shows to strings): "VRAM Total Memory (B)" and "VRAM Total Used
// Memory (B)" in bytes, the product as "Card Series" (older releases) or
// "Device Name" (ROCm 6), with "Card Model" and "Card SKU". Keys that are
// not cards ("system") are ignored.
func ParseROCmSMI(out []byte) ([]GPU, error) {
	var cards map[string]map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(out), &cards); err != nil {
		return nil, fmt.Errorf("rocm-smi: not the JSON --json prints: %v", err)
	}
	var gpus []GPU
	for key, fields := range cards {
		idx, ok := strings.CutPrefix(key, "card")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 || n > 1<<20 {
			return nil, fmt.Errorf("rocm-smi: %q is not card<N>", clip(key))
		}
		field := func(names ...string) string {
			for _, want := range names {
				for k, v := range fields {
					if s, ok := v.(string); ok && strings.EqualFold(k, want) && s != "" && s != "N/A" {
						return s
					}
				}
			}
			return ""
		}
		g := GPU{Index: n, Name: field("Card Series", "Device Name", "Card SKU", "Card Model")}
		if g.Name == "" {
			g.Name = "AMD GPU"
		}
		total, err := bytesField(field("VRAM Total Memory (B)"))
		if err != nil {
			return nil, fmt.Errorf("rocm-smi %s: \"VRAM Total Memory (B)\" %w (rocm-smi needs --showmeminfo vram)", key, err)
		}
		used, err := bytesField(field("VRAM Total Used Memory (B)"))
		if err != nil {
			return nil, fmt.Errorf("rocm-smi %s: \"VRAM Total Used Memory (B)\" %w", key, err)
		}
		if used > total {
			return nil, fmt.Errorf("rocm-smi %s: %d bytes used of %d", key, used, total)
		}
		g.TotalMiB, g.FreeMiB = total/MiB, (total-used)/MiB
		if len(gpus) == maxGPUs {
			return nil, fmt.Errorf("rocm-smi lists more than %d GPUs", maxGPUs)
		}
		gpus = append(gpus, g)
	}
	if len(gpus) == 0 {
		return nil, errors.New("rocm-smi listed no card")
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	return gpus, nil
}

func bytesField(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("is missing")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > 1<<50 {
		return 0, fmt.Errorf("is %q, not a size in bytes", clip(s))
	}
	return v, nil
}

// ParseSystemProfiler reads `system_profiler SPDisplaysDataType -json` and
// returns the name of the Apple-silicon GPU. The format is Apple's
// (system_profiler(8), -json): {"SPDisplaysDataType": [ {…}, … ]}, one
// object per graphics device, with "sppci_model" (e.g. "Apple M2 Pro"),
// "spdisplays_vendor" ("sppci_vendor_Apple" on Apple silicon) and
// "sppci_cores". An Intel Mac's GPUs are not Apple silicon: no unified
// memory to use, an error.
func ParseSystemProfiler(out []byte) (string, error) {
	var doc struct {
		Displays []struct {
			Name   string `json:"_name"`
			Model  string `json:"sppci_model"`
			Vendor string `json:"spdisplays_vendor"`
			Cores  string `json:"sppci_cores"`
		} `json:"SPDisplaysDataType"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &doc); err != nil {
		return "", fmt.Errorf("system_profiler: not the JSON -json prints: %v", err)
	}
	if len(doc.Displays) == 0 {
		return "", errors.New("system_profiler listed no graphics device")
	}
	for _, d := range doc.Displays {
		model := strings.TrimSpace(d.Model)
		if strings.HasPrefix(model, "Apple M") || (strings.Contains(d.Vendor, "Apple") && model != "") {
			name := model
			if d.Cores != "" {
				name += " (" + d.Cores + "-core GPU)"
			}
			return name, nil
		}
	}
	return "", fmt.Errorf("system_profiler: no Apple-silicon GPU (found %s)", clip(doc.Displays[0].Model))
}

// ParseSysctlMemsize reads `sysctl -n hw.memsize`: the bytes of memory as
// a decimal number on one line (sysctl(8) on macOS).
func ParseSysctlMemsize(out []byte) (int64, error) {
	s := strings.TrimSpace(string(out))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("sysctl hw.memsize: %q is not a size in bytes", clip(s))
	}
	return v, nil
}

// ParseMeminfo reads Linux's /proc/meminfo (proc(5): "Name:   value kB"
// lines) and returns MemTotal and MemAvailable in bytes. A kernel before
// 3.14 has no MemAvailable: available is then 0 (unknown).
func ParseMeminfo(b []byte) (total, available int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), 4096)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "MemTotal" && name != "MemAvailable") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/meminfo: %s is %q, want \"<n> kB\"", name, clip(strings.TrimSpace(rest)))
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || v < 0 || v > 1<<45 {
			return 0, 0, fmt.Errorf("/proc/meminfo: %s is %q, not a number of kB", name, clip(fields[0]))
		}
		if name == "MemTotal" {
			total = v * 1024
		} else {
			available = v * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("/proc/meminfo: %w", err)
	}
	if total == 0 {
		return 0, 0, errors.New("/proc/meminfo has no MemTotal")
	}
	return total, available, nil
}

// clip shortens a quoted piece of tool output for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
