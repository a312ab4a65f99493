//go:build !amd64

package expf

import "testing"

// paths lists the implementations on this architecture: the Go path only.
func paths(t testing.TB) []path {
	return []path{{"go", func(testing.TB) {}}}
}
