// Package httpstream is the HTTP plumbing the workerd backends share: a
// client tuned for long streamed answers, sending a request with non-2xx
// answers read (capped) for the backend's own error, and a scanner for
// the answer's lines with a bound on their length.
package httpstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// MaxErrorBody bounds how much of a non-2xx answer's body is read.
const MaxErrorBody = 64 << 10

// Client returns a client with no overall timeout (the request's context
// governs) and bounded dial and handshake times.
func Client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// Do sends req with c and returns a 2xx answer. When sending fails it
// returns the request context's error if that is done, else the error
// prefixed with "prefix: ". Any other answer it closes, and returns
// failed(resp, body) with the first MaxErrorBody bytes of the body.
func Do(c *http.Client, req *http.Request, prefix string, failed func(resp *http.Response, body []byte) error) (*http.Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	return nil, failed(resp, raw)
}

// Scanner reads a stream line by line, lines of at most max bytes.
type Scanner struct {
	*bufio.Scanner
	max    int
	prefix string
}

// NewScanner returns a Scanner of r whose errors start with "prefix: ".
func NewScanner(r io.Reader, max int, prefix string) *Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, max)), max)
	return &Scanner{Scanner: sc, max: max, prefix: prefix}
}

// Err is nil at the end of the stream, else the read error, one that says
// so where a line was longer than max.
func (s *Scanner) Err() error {
	err := s.Scanner.Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("%s: stream line longer than %d bytes", s.prefix, s.max)
	}
	return fmt.Errorf("%s: read stream: %w", s.prefix, err)
}
