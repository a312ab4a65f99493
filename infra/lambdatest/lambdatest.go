// Package lambdatest runs the gateway's Lambda functions as AWS runs them:
// each function's bootstrap binary, built with the flags of
// scripts/build-lambdas, under AWS's Lambda Runtime Interface Emulator
// (RIE), invoked over the emulator's HTTP API with real event payloads.
//
// The emulator is built from its Go module (scripts/test installs it as
// .cache/bin/aws-lambda-rie; C0MPUTE_RIE overrides the path). Tests skip
// through testenv when it is missing.
//
// What the emulator does and does not do, as read from its source and
// seen in these tests:
//
//   - Classic mode (no AWS_LAMBDA_MAX_CONCURRENCY) runs one invocation at
//     a time; its source refuses a second concurrent one (400). Invoke
//     serialises calls per emulator for that reason.
//   - It does not stream. A function that answers in streaming mode
//     (lambdaurl.Start sends Lambda-Runtime-Function-Response-Mode:
//     streaming) is accepted, but the emulator reads the whole body and
//     returns it when the function finishes: the Function URL prelude
//     (status and headers as JSON), eight zero bytes, then the body.
//     SplitStreamingResponse decodes that. Streaming itself is tested
//     in-process through lambdaurl.Wrap.
//   - It logs the init phase's duration (INIT REPORT), the cold-start
//     figure InitDuration reads.
package lambdatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/lambdabuild"
	"github.com/c0mpute/c0mpute/infra/testenv"
)

// EnvRIE overrides where the emulator binary is.
const EnvRIE = "C0MPUTE_RIE"

// RepoRoot is the repository root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary finds the emulator; why says what is missing when path is "".
func Binary() (path, why string) {
	if p := os.Getenv(EnvRIE); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", EnvRIE + ": " + err.Error()
		}
		return p, ""
	}
	p := filepath.Join(RepoRoot(), ".cache", "bin", "aws-lambda-rie")
	if _, err := os.Stat(p); err != nil {
		return "", "no " + p + " and " + EnvRIE + " unset"
	}
	return p, ""
}

// RequireRIE returns the emulator's path or ends the test via testenv.
func RequireRIE(t testing.TB) string {
	t.Helper()
	p, why := Binary()
	if p == "" {
		testenv.Missing(t, "Lambda Runtime Interface Emulator", why)
	}
	return p
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
	// buildDir outlives single tests: one build per function per test
	// binary.
	buildDir string
)

// Bootstrap builds functions/cmd/<fn> for this machine's architecture with
// scripts/build-lambdas' flags, once per test process, and returns the
// bootstrap's path.
func Bootstrap(t testing.TB, fn string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[fn]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "c0mpute-lambdatest-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	arts, err := lambdabuild.Build(context.Background(), lambdabuild.Options{Root: RepoRoot(), Arch: runtime.GOARCH,
		Out: buildDir, Functions: []string{fn}})
	if err != nil {
		t.Fatalf("build %s: %v", fn, err)
	}
	built[fn] = arts[0].Bootstrap
	return arts[0].Bootstrap
}

// Cleanup removes the built bootstraps (TestMain calls it).
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// Emulator is one function running under the RIE.
type Emulator struct {
	url  string
	cmd  *exec.Cmd
	mu   sync.Mutex // one invocation at a time, as the emulator requires
	logs *testenv.Buffer
	done chan struct{}
}

// Start runs bootstrap under the emulator with env as the function's
// environment (plus PATH and HOME), on free loopback ports, and stops it
// when the test ends. Like Lambda, the emulator starts the function at the
// first invocation.
func Start(t testing.TB, rie, bootstrap string, env map[string]string) *Emulator {
	t.Helper()
	apiPort, rtPort := freePort(t), freePort(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", "127.0.0.1:"+apiPort,
		"--runtime-api-address", "127.0.0.1:"+rtPort, bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "AWS_LAMBDA_FUNCTION_TIMEOUT=120"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group: stopping it stops the function too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	e := &Emulator{url: "http://127.0.0.1:" + apiPort + "/2015-03-31/functions/function/invocations",
		cmd: cmd, logs: &testenv.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start emulator: %v", err)
	}
	go func() { _ = cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-e.done
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("emulator output (%s):\n%s", filepath.Base(filepath.Dir(bootstrap)), tail(e.logs.String(), 6000))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+apiPort, time.Second)
		if err == nil {
			c.Close()
			return e
		}
		select {
		case <-e.done:
			t.Fatalf("emulator exited at start:\n%s", e.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator not listening after 10 s:\n%s", e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Response is what the emulator answered.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// FunctionError is the error payload Lambda returns when a handler fails.
type FunctionError struct {
	Message string `json:"errorMessage"`
	Type    string `json:"errorType"`
}

func (e *FunctionError) Error() string { return "function error " + e.Type + ": " + e.Message }

// Invoke sends one event and returns the function's response; a handler
// error comes back as *FunctionError.
func (e *Emulator) Invoke(ctx context.Context, event any) (Response, error) {
	payload, ok := event.([]byte)
	if !ok {
		var err error
		if payload, err = json.Marshal(event); err != nil {
			return Response{}, fmt.Errorf("lambdatest: encode event: %w", err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		return Response{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("lambdatest: invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, fmt.Errorf("lambdatest: read response: %w", err)
	}
	r := Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("lambdatest: emulator answered %d: %s", resp.StatusCode, tail(string(body), 500))
	}
	var fe FunctionError
	if json.Unmarshal(body, &fe) == nil && fe.Type != "" {
		return r, &fe
	}
	return r, nil
}

// Logs is what the emulator and the function printed so far.
func (e *Emulator) Logs() string { return e.logs.String() }

// The emulator's REPORT line carries an "Init Duration" that only times
// handing the init request over (well under a millisecond); its rapid log
// line "INIT REPORT(durationMs: …)" times the runtime's init phase, from
// starting the bootstrap to its first request for work, as Lambda's
// Init Duration does.
var initRE = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// InitDuration is the cold start the emulator measured: from starting the
// bootstrap to its first request for work (everything main does before
// lambda.Start).
func (e *Emulator) InitDuration() (time.Duration, error) {
	m := initRE.FindStringSubmatch(e.logs.String())
	if m == nil {
		return 0, errors.New("lambdatest: no INIT REPORT in the emulator's output")
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// SplitStreamingResponse decodes a response-streaming Function URL reply
// as the emulator returns it whole: the JSON prelude (statusCode, headers,
// cookies), eight zero bytes, the body.
func SplitStreamingResponse(b []byte) (status int, header map[string]string, body []byte, err error) {
	i := bytes.Index(b, make([]byte, 8))
	if i < 0 {
		return 0, nil, nil, errors.New("lambdatest: no prelude separator: not a streaming response")
	}
	var prelude struct {
		StatusCode int               `json:"statusCode"`
		Headers    map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(b[:i], &prelude); err != nil {
		return 0, nil, nil, fmt.Errorf("lambdatest: prelude: %w", err)
	}
	return prelude.StatusCode, prelude.Headers, b[i+8:], nil
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
