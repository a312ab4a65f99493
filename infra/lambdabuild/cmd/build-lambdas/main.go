// Command build-lambdas builds every function under functions/cmd into a
// static bootstrap for Lambda's provided.al2023 runtime and zips each one:
//
//	build-lambdas [-arch arm64|amd64] [-out DIR] [function ...]
//
// Output: DIR/<function>/bootstrap and DIR/<function>.zip (default DIR:
// bin/lambda/<arch>), then one line per function with its sizes and the
// zip's SHA-256. scripts/build-lambdas runs it from the repository root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/c0mpute/c0mpute/infra/lambdabuild"
)

func main() {
	arch := flag.String("arch", "arm64", "target architecture: arm64 (what terraform/ deploys) or amd64")
	out := flag.String("out", "", "output folder (default bin/lambda/<arch>)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: build-lambdas [-arch arm64|amd64] [-out DIR] [function ...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	if *out == "" {
		*out = filepath.Join("bin", "lambda", *arch)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	arts, err := lambdabuild.Build(ctx, lambdabuild.Options{Root: root, Arch: *arch, Out: *out, Functions: flag.Args(), Stderr: os.Stderr})
	if err != nil {
		fail(err)
	}
	for _, a := range arts {
		fmt.Printf("%-8s %s  bootstrap %6.1f MiB  zip %5.1f MiB  sha256 %s\n", a.Name, a.Zip,
			float64(a.BootstrapSize)/(1<<20), float64(a.ZipSize)/(1<<20), a.ZipSHA256)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "build-lambdas:", err)
	os.Exit(1)
}
