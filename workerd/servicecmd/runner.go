package servicecmd

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// maxOutput bounds what is kept of a service-manager command's output:
// systemctl show and launchctl print answer in a few KB; anything past
// this is dropped (the command still runs to its end).
const maxOutput = 64 << 10

// Result is what a finished command left: its exit status and the start of
// its combined standard output and error.
type Result struct {
	// Output is at most maxOutput bytes of stdout and stderr together.
	Output []byte
	// Truncated says output past maxOutput was dropped.
	Truncated bool
	// ExitCode is the command's exit status (0: success).
	ExitCode int
}

// Runner runs the service manager's commands (systemctl, launchctl). It is
// an interface so tests can record what would be run: a systemd user
// session and launchd cannot run in a test container.
type Runner interface {
	// Run runs name with args and waits for it. err is for a command
	// that could not be run or was cut off by ctx; a command that ran
	// and failed is a Result with a non-zero ExitCode.
	Run(ctx context.Context, name string, args ...string) (Result, error)
}

// ExecRunner runs commands with os/exec. It is the Runner outside tests.
type ExecRunner struct{}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) (Result, error) {
	out := &capped{max: maxOutput}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// A child that keeps the pipe open after ctx ends must not hold Run.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	res := Result{Output: out.buf, Truncated: out.dropped}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s: %w", name, ctx.Err())
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		res.ExitCode = exit.ExitCode()
		return res, nil
	}
	return res, fmt.Errorf("%s: %w", name, err)
}

// capped keeps the first max bytes written to it and drops the rest, while
// still accepting them so the writer never blocks.
type capped struct {
	buf     []byte
	max     int
	dropped bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - len(c.buf)
	if room < len(p) {
		c.dropped = true
	}
	c.buf = append(c.buf, p[:max(0, min(room, len(p)))]...)
	return len(p), nil
}
