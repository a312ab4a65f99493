package servicecmd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// fakeManager is a stand-in for `systemctl --user` and launchctl, which
// need a systemd user session or launchd, neither of which runs in this
// test container. It records every command and keeps the state those
// commands change (enabled, active, loaded), so status after install
// answers as the real managers would. Commands it does not know fail the
// test. fail makes one command line exit non-zero; err makes it fail to
// start.
type fakeManager struct {
	t    *testing.T
	mu   sync.Mutex
	fail map[string]Result
	err  map[string]error

	calls                   []string
	enabled, active, loaded bool
	restarts                int
}

func newFake(t *testing.T) *fakeManager {
	return &fakeManager{t: t, fail: map[string]Result{}, err: map[string]error{}}
}

func (f *fakeManager) Run(_ context.Context, name string, args ...string) (Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	line := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, line)
	if err, ok := f.err[line]; ok {
		return Result{}, err
	}
	if r, ok := f.fail[line]; ok {
		return r, nil
	}
	ok := Result{}
	switch line {
	case "systemctl --user daemon-reload":
		return ok, nil
	case "systemctl --user enable --now workerd.service":
		f.enabled, f.active = true, true
		return ok, nil
	case "systemctl --user restart workerd.service":
		f.active = true
		f.restarts++
		return ok, nil
	case "systemctl --user disable --now workerd.service":
		f.enabled, f.active = false, false
		return ok, nil
	case "systemctl --user show workerd.service --property=LoadState,UnitFileState,ActiveState,SubState,MainPID,NRestarts":
		state := map[bool]string{true: "enabled", false: "disabled"}[f.enabled]
		active, sub, pid := "inactive", "dead", 0
		if f.active {
			active, sub, pid = "active", "running", 4242
		}
		return Result{Output: fmt.Appendf(nil, "LoadState=loaded\nUnitFileState=%s\nActiveState=%s\nSubState=%s\nMainPID=%d\nNRestarts=%d\n",
			state, active, sub, pid, f.restarts)}, nil
	case "launchctl print gui/501/network.c0mpute.workerd":
		if !f.loaded {
			return Result{ExitCode: 113, Output: []byte("Bad request.\nCould not find service \"network.c0mpute.workerd\" in domain for user gui: 501\n")}, nil
		}
		// The shape of launchctl print's answer, abridged.
		return Result{Output: []byte(`gui/501/network.c0mpute.workerd = {
	active count = 1
	path = /Users/x/Library/LaunchAgents/network.c0mpute.workerd.plist
	state = running

	program = /usr/local/bin/workerd
	arguments = {
		/usr/local/bin/workerd
		run
	}

	pid = 4242
	last exit code = (never exited)
}
`)}, nil
	case "launchctl bootout gui/501/network.c0mpute.workerd":
		f.loaded = false
		return ok, nil
	}
	if strings.HasPrefix(line, "launchctl bootstrap gui/501 ") {
		f.loaded = true
		return ok, nil
	}
	f.t.Errorf("fake service manager: unexpected command %q", line)
	return Result{ExitCode: 1}, nil
}

// took returns the commands run so far and forgets them.
func (f *fakeManager) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}
