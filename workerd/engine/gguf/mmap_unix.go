//go:build unix

package gguf

import (
	"fmt"
	"os"
	"syscall"
)

// Open memory-maps the file at path read-only and parses it. Close
// unmaps it.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	size := st.Size()
	if size < 24 || size != int64(int(size)) {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrFormat, path, size)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = syscall.Munmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.unmap = func() error { return syscall.Munmap(data) }
	return f, nil
}
