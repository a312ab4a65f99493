// Package cors lets browser pages on chosen origins call the API: the
// answer names the calling origin, and a preflight is answered at once.
package cors

import (
	"net/http"
	"slices"
	"strings"
)

// corsMaxAge is how long a browser may cache a preflight's answer, in
// seconds.
const corsMaxAge = "600"

// exposed are the response headers a browser client may read.
const exposed = "x-request-id, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, x-ratelimit-reset-requests, " +
	"retry-after, x-c0mpute-cost-credits, x-balance-remaining, payment-required, payment-response, x-payment-response"

// Handler wraps next for origins: the answer names the calling origin (or
// * when every origin is allowed), and a preflight (OPTIONS with
// Access-Control-Request-Method) is answered at once. API keys travel in
// the Authorization header, never in cookies, so no credentials are
// allowed. An empty origins list leaves next as it is: CORS is off.
func Handler(origins []string, next http.Handler) http.Handler {
	if len(origins) == 0 {
		return next
	}
	all := slices.Contains(origins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !all {
			// The answer depends on the origin: caches must key on it.
			w.Header().Add("Vary", "Origin")
		}
		origin := r.Header.Get("Origin")
		if origin == "" || !all && !slices.Contains(origins, origin) {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		if all {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE, OPTIONS")
			allow := "Authorization, Content-Type"
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				allow += ", " + req
			}
			h.Set("Access-Control-Allow-Headers", allow)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", exposed)
		next.ServeHTTP(w, r)
	})
}

// ParseOrigins reads a comma-separated list of origins (scheme://host[:port],
// or * for any); "" is none.
func ParseOrigins(list string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(list, ",") {
		o = strings.TrimRight(strings.TrimSpace(o), "/")
		switch {
		case o == "":
			continue
		case o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://"):
			return nil, &originError{o}
		}
		out = append(out, o)
	}
	return out, nil
}

type originError struct{ origin string }

func (e *originError) Error() string {
	return "CORS origin " + e.origin + " is not scheme://host[:port] or *"
}
