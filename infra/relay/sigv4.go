package relay

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// SignatureSkew is how far a management call's X-Amz-Date may be from the
// relay's clock, either way. "A request must reach AWS within five minutes
// of the time stamp in the request" (IAM User Guide, "AWS API request
// signing", docs.aws.amazon.com/IAM/latest/UserGuide/reference_aws-signing.html);
// API Gateway's answer past it is "Signature expired: … (… - 5 min.)".
const SignatureSkew = 5 * time.Minute

// SigV4 constants of the management API.
const (
	sigv4Algorithm = "AWS4-HMAC-SHA256"
	// sigv4Service is the signing name of API Gateway's management API
	// (the SDK's apigatewaymanagementapi client signs for it).
	sigv4Service    = "execute-api"
	sigv4Terminator = "aws4_request"
	// amzDateLayout is X-Amz-Date's format (ISO 8601 basic, UTC).
	amzDateLayout = "20060102T150405Z"
	scopeLayout   = "20060102"
)

// AWS's messages for refused signatures, as API Gateway sends them.
const (
	msgMissingToken = "Missing Authentication Token"
	msgInvalidToken = "The security token included in the request is invalid."
	msgBadSignature = "The request signature we calculated does not match the signature you provided. " +
		"Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	msgIncomplete = "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters " +
		"of the AWS4-HMAC-SHA256 algorithm."
	msgNoDate = "Authorization header requires existence of a valid 'X-Amz-Date' header."
)

// authorization is a parsed SigV4 Authorization header:
// "AWS4-HMAC-SHA256 Credential=AKID/date/region/service/aws4_request,
// SignedHeaders=h1;h2, Signature=hex".
type authorization struct {
	accessKeyID   string
	scopeDate     string
	region        string
	service       string
	terminator    string
	signedHeaders []string
	signature     string
}

// errIncomplete is a header that is not a complete SigV4 Authorization.
var errIncomplete = errors.New("relay: incomplete SigV4 Authorization header")

// parseAuthorization parses a SigV4 Authorization header value.
func parseAuthorization(h string) (authorization, error) {
	rest, ok := strings.CutPrefix(h, sigv4Algorithm+" ")
	if !ok {
		return authorization{}, errIncomplete
	}
	var a authorization
	var haveCred, haveHeaders, haveSig bool
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return authorization{}, errIncomplete
		}
		switch k {
		case "Credential":
			f := strings.Split(v, "/")
			if len(f) != 5 || f[0] == "" {
				return authorization{}, errIncomplete
			}
			a.accessKeyID, a.scopeDate, a.region, a.service, a.terminator = f[0], f[1], f[2], f[3], f[4]
			haveCred = true
		case "SignedHeaders":
			if v == "" {
				return authorization{}, errIncomplete
			}
			a.signedHeaders = strings.Split(v, ";")
			haveHeaders = true
		case "Signature":
			if v == "" {
				return authorization{}, errIncomplete
			}
			a.signature = v
			haveSig = true
		}
	}
	if !haveCred || !haveHeaders || !haveSig {
		return authorization{}, errIncomplete
	}
	return a, nil
}

// refusal is why a management call is refused: API Gateway's 403 and its
// message.
type refusal struct {
	status int
	code   string
	msg    string
}

func forbidden(msg string) *refusal {
	return &refusal{status: http.StatusForbidden, code: errForbidden, msg: msg}
}

// authenticate verifies the call's SigV4 signature as IAM does and returns
// the request body it read (at most the message limit), or why the call is
// refused. It rebuilds the request the client signed — method, path, query,
// only the headers named in SignedHeaders, Host and Content-Length as
// received, the hash of the body read — signs it with the configured
// secret at the call's X-Amz-Date with the region and service of its
// credential scope, and compares the signatures in constant time. With no
// credentials configured nothing is accepted.
func (r *Relay) authenticate(req *http.Request) ([]byte, *refusal) {
	h := req.Header.Get("Authorization")
	if h == "" {
		return nil, forbidden(msgMissingToken)
	}
	a, err := parseAuthorization(h)
	if err != nil {
		return nil, forbidden(msgIncomplete)
	}
	// hmac.Equal keeps the key id comparison from leaking, like the
	// signature's; an empty configured key matches nothing.
	if r.accessKeyID == "" || r.secretAccessKey == "" || !hmac.Equal([]byte(a.accessKeyID), []byte(r.accessKeyID)) {
		return nil, forbidden(msgInvalidToken)
	}
	// The relay issues no temporary credentials, so no session token can
	// be valid.
	if req.Header.Get("X-Amz-Security-Token") != "" {
		return nil, forbidden(msgInvalidToken)
	}
	amzDate := req.Header.Get("X-Amz-Date")
	signedAt, err := time.Parse(amzDateLayout, amzDate)
	if err != nil {
		return nil, forbidden(msgNoDate)
	}
	if ref := checkScope(a, signedAt); ref != nil {
		return nil, ref
	}
	if ref := checkSkew(signedAt, r.now()); ref != nil {
		return nil, ref
	}
	if !slices.Contains(a.signedHeaders, "host") {
		return nil, forbidden("'Host' must be a 'SignedHeader' in the AWS Authorization.")
	}

	body, err := io.ReadAll(io.LimitReader(req.Body, int64(r.maxMessage)+1))
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, code: errBadRequest, msg: "could not read the request body"}
	}
	if len(body) > r.maxMessage {
		// Unverifiable without reading it all; refused either way, and
		// with the key id and date already checked.
		return nil, &refusal{status: http.StatusRequestEntityTooLarge, code: errPayloadTooLarge, msg: "Request entity too large"}
	}
	want, err := r.sign(req, a, signedAt, body)
	if err != nil {
		r.log.Warn("relay: cannot recompute a management signature", "err", err)
		return nil, forbidden(msgBadSignature)
	}
	if !hmac.Equal([]byte(a.signature), []byte(want)) {
		return nil, forbidden(msgBadSignature)
	}
	return body, nil
}

// checkScope refuses a credential scope that is not this API's or not of
// the signing day, with AWS's messages.
func checkScope(a authorization, signedAt time.Time) *refusal {
	if day := signedAt.UTC().Format(scopeLayout); a.scopeDate != day {
		return forbidden(fmt.Sprintf("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from 'x-amz-date'.",
			a.scopeDate, day))
	}
	if a.service != sigv4Service {
		return forbidden(fmt.Sprintf("Credential should be scoped to correct service: '%s'. ", sigv4Service))
	}
	if a.region == "" {
		return forbidden("Credential should be scoped to a valid region. ")
	}
	if a.terminator != sigv4Terminator {
		return forbidden(fmt.Sprintf("Credential should be scoped with a valid terminator: '%s', not '%s'.", sigv4Terminator, a.terminator))
	}
	return nil
}

// checkSkew refuses a signing time more than SignatureSkew from now, in
// API Gateway's words.
func checkSkew(signedAt, now time.Time) *refusal {
	now = now.UTC()
	switch {
	case signedAt.Before(now.Add(-SignatureSkew)):
		return forbidden(fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - 5 min.)",
			signedAt.Format(amzDateLayout), now.Add(-SignatureSkew).Format(amzDateLayout), now.Format(amzDateLayout)))
	case signedAt.After(now.Add(SignatureSkew)):
		return forbidden(fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + 5 min.)",
			signedAt.Format(amzDateLayout), now.Add(SignatureSkew).Format(amzDateLayout), now.Format(amzDateLayout)))
	}
	return nil
}

// sign returns the signature the configured credentials give the request
// as the client described it in a.
func (r *Relay) sign(req *http.Request, a authorization, signedAt time.Time, body []byte) (string, error) {
	// The path exactly as received: EscapedPath gives back the client's
	// escaping (RawPath), which is what it signed.
	u := &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	clone, err := http.NewRequestWithContext(context.Background(), req.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("relay: rebuild %s %s: %w", req.Method, u, err)
	}
	clone.URL = u
	clone.Host = req.Host
	clone.Header = make(http.Header)
	clone.ContentLength = 0
	for _, name := range a.signedHeaders {
		switch name {
		case "host":
			// The signer takes it from clone.Host.
		case "content-length":
			// The signer signs ContentLength, not the header.
			clone.ContentLength = req.ContentLength
		default:
			if vs := req.Header.Values(name); len(vs) > 0 {
				clone.Header[http.CanonicalHeaderKey(name)] = slices.Clone(vs)
			}
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: r.accessKeyID, SecretAccessKey: r.secretAccessKey}
	if err := r.signer.SignHTTP(context.Background(), creds, clone, hex.EncodeToString(sum[:]),
		a.service, a.region, signedAt); err != nil {
		return "", fmt.Errorf("relay: sign %s %s: %w", req.Method, u, err)
	}
	got, err := parseAuthorization(clone.Header.Get("Authorization"))
	if err != nil {
		return "", fmt.Errorf("relay: the signer's own Authorization header: %w", err)
	}
	return got.signature, nil
}
