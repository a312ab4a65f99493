package cors

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestCORS(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, tc := range []struct {
		name        string
		origins     []string
		method      string
		origin      string
		preflight   bool
		wantStatus  int
		wantAllow   string
		wantExposed bool
	}{
		{"off", nil, http.MethodGet, "https://app.example", false, http.StatusTeapot, "", false},
		{"allowed", []string{"https://app.example"}, http.MethodGet, "https://app.example", false, http.StatusTeapot, "https://app.example", true},
		{"another origin", []string{"https://app.example"}, http.MethodGet, "https://evil.example", false, http.StatusTeapot, "", false},
		{"no origin", []string{"https://app.example"}, http.MethodGet, "", false, http.StatusTeapot, "", false},
		{"any", []string{"*"}, http.MethodPost, "https://x.example", false, http.StatusTeapot, "*", true},
		{"preflight", []string{"https://app.example"}, http.MethodOptions, "https://app.example", true, http.StatusNoContent, "https://app.example", false},
		{"preflight from another origin", []string{"https://app.example"}, http.MethodOptions, "https://evil.example", true, http.StatusTeapot, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/v1/models", nil)
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			if tc.preflight {
				r.Header.Set("Access-Control-Request-Method", "POST")
				r.Header.Set("Access-Control-Request-Headers", "x-stainless-os")
			}
			w := httptest.NewRecorder()
			Handler(tc.origins, ok).ServeHTTP(w, r)
			h := w.Result().Header
			if w.Code != tc.wantStatus || h.Get("Access-Control-Allow-Origin") != tc.wantAllow ||
				(h.Get("Access-Control-Expose-Headers") != "") != tc.wantExposed {
				t.Errorf("status %d, allow-origin %q, expose %q", w.Code, h.Get("Access-Control-Allow-Origin"), h.Get("Access-Control-Expose-Headers"))
			}
			if tc.preflight && tc.wantStatus == http.StatusNoContent &&
				(h.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type, x-stainless-os" || h.Get("Access-Control-Allow-Credentials") != "") {
				t.Errorf("preflight headers: %v", h)
			}
		})
	}
	if _, err := ParseOrigins("https://a.example, http://localhost:3000/ ,*"); err != nil {
		t.Error(err)
	}
	if _, err := ParseOrigins("a.example"); err == nil {
		t.Error("an origin without a scheme was accepted")
	}
}
