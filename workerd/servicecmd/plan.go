package servicecmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// plan is the steps of an install or uninstall, in order. --dry-run prints
// them; otherwise they run, and the first failure stops the rest.
type plan struct {
	steps  []step
	runner Runner
}

// step is one of: make a folder, write a file, remove a file, run a
// command.
type step struct {
	mkdir  string
	write  *fileOut
	remove string
	cmd    []string
	// when, if set, decides at run time whether the step is needed (it
	// may run a command, so --dry-run shows only note); note says so.
	when func(context.Context) (bool, error)
	note string
}

// fileOut is a file to write. Shown is its text for --dry-run, secrets
// hidden.
type fileOut struct {
	path           string
	mode           fs.FileMode
	content, shown []byte
}

// hidden replaces a secret's value wherever a file is shown.
const hidden = "(hidden)"

// print writes the plan for --dry-run.
func (p plan) print(w io.Writer) {
	fmt.Fprintln(w, "dry run: nothing is written or run")
	for _, s := range p.steps {
		note := ""
		if s.note != "" {
			note = "  # " + s.note
		}
		switch {
		case s.mkdir != "":
			fmt.Fprintf(w, "would create folder %s%s\n", s.mkdir, note)
		case s.write != nil:
			fmt.Fprintf(w, "would write %s (mode %04o):%s\n", s.write.path, s.write.mode, note)
			w.Write(s.write.shown)
			if !bytes.HasSuffix(s.write.shown, []byte("\n")) {
				fmt.Fprintln(w)
			}
		case s.remove != "":
			fmt.Fprintf(w, "would remove %s%s\n", s.remove, note)
		default:
			fmt.Fprintf(w, "would run: %s%s\n", shellQuote(s.cmd), note)
		}
	}
}

// run carries the plan out, saying what it did.
func (p plan) run(ctx context.Context, w io.Writer) error {
	for _, s := range p.steps {
		if s.when != nil {
			need, err := s.when(ctx)
			if err != nil {
				return err
			}
			if !need {
				continue
			}
		}
		switch {
		case s.mkdir != "":
			if err := os.MkdirAll(s.mkdir, 0o700); err != nil {
				return err
			}
		case s.write != nil:
			if err := writeFile(s.write.path, s.write.content, s.write.mode); err != nil {
				return err
			}
			fmt.Fprintf(w, "wrote %s\n", s.write.path)
		case s.remove != "":
			if err := os.Remove(s.remove); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			fmt.Fprintf(w, "removed %s\n", s.remove)
		default:
			if err := runChecked(ctx, p.runner, s.cmd); err != nil {
				return err
			}
			fmt.Fprintf(w, "ran: %s\n", shellQuote(s.cmd))
		}
	}
	return nil
}

// runChecked runs a command and turns a failure into an error that shows
// what it printed.
func runChecked(ctx context.Context, r Runner, cmd []string) error {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	hint := ""
	if cmd[0] == "systemctl" {
		hint = " (systemctl --user needs your login session: run this in a shell you logged in to, not under sudo or su)"
	}
	res, err := r.Run(ctx, cmd[0], cmd[1:]...)
	if err != nil {
		return fmt.Errorf("%s: %w%s", shellQuote(cmd), err, hint)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s failed (exit status %d): %s%s", shellQuote(cmd), res.ExitCode, outputText(res), hint)
	}
	return nil
}

// outputText is a command's output for an error message: trimmed, and
// marked where it was cut.
func outputText(res Result) string {
	s := strings.TrimSpace(string(bytes.ToValidUTF8(res.Output, []byte("?"))))
	if s == "" {
		s = "(no output)"
	}
	if res.Truncated {
		s += " […]"
	}
	return s
}

// writeFile writes a file whole, with exactly mode: a temporary file in
// the same folder renamed over the old one, so a reader never sees half a
// unit and an older file's looser mode is not kept.
func writeFile(path string, b []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, a no-op
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// shellQuote is a command as one would type it: words with anything but
// safe characters in single quotes.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		safe := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+,", r)) {
				safe = false
				break
			}
		}
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// valueError is a value a unit or plist cannot hold, as the template's
// quoting functions report it.
type valueError struct{ error }

// templateError is a rendering failure: a value that cannot be carried is
// reported as it is, without the template's position in front of it.
func templateError(what string, err error) error {
	var v valueError
	if errors.As(err, &v) {
		return v.error
	}
	return fmt.Errorf("%s: %w", what, err)
}
