package servicecmd

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
)

// label is the launchd agent's label, and its plist's name.
const label = "network.c0mpute.workerd"

// logName is the agent's log file, in <home>/logs: launchd sends the
// daemon's stdout and stderr there.
const logName = "workerd.log"

// launchd installs workerd as a launchd agent in the user's gui domain,
// driven by launchctl.
type launchd struct {
	plist string
	run   Runner
	uid   int
}

func (d *launchd) file() string { return d.plist }

func (d *launchd) domain() string { return "gui/" + strconv.Itoa(d.uid) }
func (d *launchd) target() string { return d.domain() + "/" + label }
func logPath(home string) string  { return filepath.Join(home, "logs", logName) }

// plistTemplate is the agent. Every string goes through xml, which
// escapes it with encoding/xml; KeepAlive with SuccessfulExit=false
// restarts workerd when it fails and leaves it stopped when it exits
// cleanly (a SIGTERM from launchctl after the drain).
var plistTemplate = template.Must(template.New("plist").Funcs(template.FuncMap{"xml": xmlText}).Parse(
	`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- workerd, the c0mpute contributor daemon, as a launchd agent. Written by
     "workerd service install"; "workerd service uninstall" removes it. -->
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>{{xml .Label}}</string>
	<key>ProgramArguments</key>
	<array>
{{- range .Args}}
		<string>{{xml .}}</string>
{{- end}}
	</array>
	<key>WorkingDirectory</key>
	<string>{{xml .Home}}</string>
{{- if .Env}}
	<key>EnvironmentVariables</key>
	<dict>
{{- range .Env}}
		<key>{{xml .Name}}</key>
		<string>{{xml .Value}}</string>
{{- end}}
	</dict>
{{- end}}
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ThrottleInterval</key>
	<integer>{{.RestartSec}}</integer>
	<key>ExitTimeOut</key>
	<integer>{{.StopSec}}</integer>
	<key>StandardOutPath</key>
	<string>{{xml .Log}}</string>
	<key>StandardErrorPath</key>
	<string>{{xml .Log}}</string>
</dict>
</plist>
`))

// plistData is what plistTemplate reads.
type plistData struct {
	service
	Label, Log          string
	RestartSec, StopSec int
}

// xmlText escapes s as XML character data. encoding/xml would turn a
// control character into U+FFFD silently, so they are refused.
func xmlText(s string) (string, error) {
	if err := printable(s); err != nil {
		return "", valueError{fmt.Errorf("%q %w, which a plist cannot carry", s, err)}
	}
	var b strings.Builder
	if err := xml.EscapeText(&b, []byte(s)); err != nil {
		return "", err
	}
	return b.String(), nil
}

// renderPlist is the agent for s; hide replaces secrets' values.
func renderPlist(s service, hide bool) ([]byte, error) {
	if hide {
		env := make([]variable, len(s.Env))
		for i, v := range s.Env {
			if v.Secret {
				v.Value = hidden
			}
			env[i] = v
		}
		s.Env = env
	}
	var b bytes.Buffer
	err := plistTemplate.Execute(&b, plistData{service: s, Label: label, Log: logPath(s.Home),
		RestartSec: int(restartDelay.Seconds()), StopSec: int(stopTimeout.Seconds())})
	if err != nil {
		return nil, templateError("the plist", err)
	}
	return b.Bytes(), nil
}

// loaded says whether launchd has the agent (launchctl print succeeds).
func (d *launchd) loaded(ctx context.Context) (bool, Result, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	res, err := d.run.Run(ctx, "launchctl", "print", d.target())
	if err != nil {
		return false, res, err
	}
	return res.ExitCode == 0, res, nil
}

func (d *launchd) installPlan(s service, existed bool) (plan, error) {
	p := plan{runner: d.run}
	content, err := renderPlist(s, false)
	if err != nil {
		return plan{}, err
	}
	shown, err := renderPlist(s, true)
	if err != nil {
		return plan{}, err
	}
	// launchd has no secrets file: a plist that holds a secret is readable
	// only by the user.
	mode, note := fs.FileMode(0o644), ""
	if len(s.Secrets()) > 0 {
		mode, note = 0o600, "it holds a secret, so only you can read it; secret values hidden here"
	}
	logs := filepath.Dir(logPath(s.Home))
	if _, err := os.Stat(logs); errors.Is(err, fs.ErrNotExist) {
		p.steps = append(p.steps, step{mkdir: logs})
	}
	p.steps = append(p.steps,
		step{cmd: []string{"launchctl", "bootout", d.target()}, note: "only if it is loaded already",
			when: func(ctx context.Context) (bool, error) { ok, _, err := d.loaded(ctx); return ok, err }},
		step{write: &fileOut{path: d.plist, mode: mode, content: content, shown: shown}, note: note},
		step{cmd: []string{"launchctl", "bootstrap", d.domain(), d.plist}})
	return p, nil
}

func (d *launchd) uninstallPlan() (plan, error) {
	p := plan{runner: d.run}
	p.steps = append(p.steps,
		step{cmd: []string{"launchctl", "bootout", d.target()}, note: "only if it is loaded; stops it: running jobs finish first",
			when: func(ctx context.Context) (bool, error) { ok, _, err := d.loaded(ctx); return ok, err }},
		step{remove: d.plist})
	return p, nil
}

func (d *launchd) installed(w io.Writer, s service) {
	if len(s.Secrets()) > 0 {
		names := make([]string, 0, len(s.Secrets()))
		for _, v := range s.Secrets() {
			names = append(names, v.Name)
		}
		fmt.Fprintf(w, "%s is only in your environment, not in %s: the plist holds it, so only you can read %s\n",
			strings.Join(names, ", "), filepath.Join(s.Home, "workerd.json"), d.plist)
	}
	fmt.Fprintf(w, `workerd is installed and running as the launchd agent %s; it starts when you log in.
Logs:   %s
Status: workerd service status
`, label, logPath(s.Home))
}

func (d *launchd) status(ctx context.Context, w io.Writer) (int, error) {
	b, err := os.ReadFile(d.plist)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(w, "installed: no (no %s; workerd service install installs it)\n", d.plist)
		return ExitNotRunning, nil
	}
	if err != nil {
		return ExitFailed, fmt.Errorf("status: %w", err)
	}
	fmt.Fprintf(w, "installed: yes\nplist:     %s\n", d.plist)
	ok, res, err := d.loaded(ctx)
	if err != nil {
		return ExitFailed, fmt.Errorf("status: launchctl print %s: %w", d.target(), err)
	}
	running := false
	if !ok {
		fmt.Fprintf(w, "loaded:    no (launchctl print %s: %s)\nrunning:   no\n", d.target(), outputText(res))
	} else {
		info := launchctlInfo(res.Output)
		fmt.Fprintf(w, "loaded:    yes, in %s\n", d.domain())
		running = info["state"] == "running"
		switch {
		case running:
			fmt.Fprintf(w, "running:   yes, pid %s\n", info["pid"])
		case info["last exit code"] != "":
			fmt.Fprintf(w, "running:   no (state %s, last exit code %s)\n", info["state"], info["last exit code"])
		default:
			fmt.Fprintf(w, "running:   no (state %s)\n", info["state"])
		}
	}
	if doc, err := decodePlist(bytes.NewReader(b)); err == nil {
		if log, ok := doc["StandardOutPath"].(string); ok {
			fmt.Fprintf(w, "logs:      %s\n", log)
		}
	}
	if !running {
		return ExitNotRunning, nil
	}
	return ExitOK, nil
}

// launchctlInfo reads the top-level "key = value" lines of launchctl
// print (state, pid, last exit code); nested blocks are skipped.
func launchctlInfo(out []byte) map[string]string {
	info := map[string]string{}
	depth := 0
	for _, line := range strings.Split(string(out), "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasSuffix(t, "{"):
			depth++
		case t == "}":
			depth--
		case depth == 1:
			if k, v, ok := strings.Cut(t, " = "); ok {
				info[k] = v
			}
		}
	}
	return info
}

// decodePlist reads an XML property list's top-level dict: strings,
// integers, booleans, arrays and dicts, as Go values.
func decodePlist(r io.Reader) (map[string]any, error) {
	dec := xml.NewDecoder(io.LimitReader(r, 1<<20))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("plist: %w", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if se.Name.Local != "plist" {
				return nil, fmt.Errorf("plist: root element is <%s>, want <plist>", se.Name.Local)
			}
			break
		}
	}
	v, err := plistValue(dec)
	if err != nil {
		return nil, err
	}
	d, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("plist: the top-level value is a %T, want a dict", v)
	}
	return d, nil
}

// plistValue reads the next value element; nil for the end of its parent.
func plistValue(dec *xml.Decoder) (any, error) {
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("plist: %w", err)
		}
		switch t := tok.(type) {
		case xml.EndElement:
			return nil, nil
		case xml.StartElement:
			switch t.Name.Local {
			case "string", "integer", "key":
				var s string
				if err := dec.DecodeElement(&s, &t); err != nil {
					return nil, fmt.Errorf("plist: <%s>: %w", t.Name.Local, err)
				}
				if t.Name.Local == "integer" {
					n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
					if err != nil {
						return nil, fmt.Errorf("plist: <integer>%s: %w", s, err)
					}
					return n, nil
				}
				if t.Name.Local == "key" {
					return plistKey(s), nil
				}
				return s, nil
			case "true", "false":
				if err := dec.Skip(); err != nil {
					return nil, fmt.Errorf("plist: %w", err)
				}
				return t.Name.Local == "true", nil
			case "array":
				arr := []any{}
				for {
					v, err := plistValue(dec)
					if err != nil {
						return nil, err
					}
					if v == nil {
						return arr, nil
					}
					if _, ok := v.(plistKey); ok {
						return nil, errors.New("plist: <key> in an <array>")
					}
					arr = append(arr, v)
				}
			case "dict":
				m := map[string]any{}
				for {
					k, err := plistValue(dec)
					if err != nil {
						return nil, err
					}
					if k == nil {
						return m, nil
					}
					key, ok := k.(plistKey)
					if !ok {
						return nil, fmt.Errorf("plist: a %T where a <key> belongs in a <dict>", k)
					}
					v, err := plistValue(dec)
					if err != nil {
						return nil, err
					}
					if _, isKey := v.(plistKey); v == nil || isKey {
						return nil, fmt.Errorf("plist: <key>%s</key> has no value", key)
					}
					if _, dup := m[string(key)]; dup {
						return nil, fmt.Errorf("plist: <key>%s</key> twice in a <dict>", key)
					}
					m[string(key)] = v
				}
			default:
				return nil, fmt.Errorf("plist: unexpected <%s>", t.Name.Local)
			}
		}
	}
}

// plistKey is a dict key while reading, told apart from a string value.
type plistKey string
