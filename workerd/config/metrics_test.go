package config

import (
	"testing"
)

// TestMetricsAndAPIURL: --metrics takes host:port (off when empty) and
// --api-url an http(s) URL, from the flag, the environment or the file;
// anything else is refused with a message naming the setting.
func TestMetricsAndAPIURL(t *testing.T) {
	base := map[string]string{EnvHome: t.TempDir(), EnvRelayURL: "ws://127.0.0.1:1", EnvToken: "cwt_x"}
	getenv := func(extra map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		}
	}
	for _, addr := range []string{"", ":9464", "127.0.0.1:9464", "localhost:9464", "[::1]:9464", "0.0.0.0:0"} {
		c, err := Load([]string{"--metrics", addr}, getenv(nil))
		if err != nil || c.MetricsAddr != addr {
			t.Errorf("--metrics %q: %q, %v", addr, c.MetricsAddr, err)
		}
	}
	c, err := Load(nil, getenv(map[string]string{EnvMetricsAddr: ":9100", EnvAPIURL: "https://api.example/v1"}))
	if err != nil || c.MetricsAddr != ":9100" || c.APIURL != "https://api.example/v1" {
		t.Errorf("from the environment: %q %q, %v", c.MetricsAddr, c.APIURL, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics", "9464"}, `--metrics (or C0MPUTE_METRICS_ADDR) is "9464": want host:port to serve Prometheus metrics on, e.g. 127.0.0.1:9464 (:9464 listens on every interface)`},
		{[]string{"--metrics", "localhost:99999"}, `--metrics (or C0MPUTE_METRICS_ADDR) is "localhost:99999": want host:port to serve Prometheus metrics on, e.g. 127.0.0.1:9464 (:9464 listens on every interface)`},
		{[]string{"--api-url", "gateway.example"}, `--api-url (or C0MPUTE_API_URL) is "gateway.example": want the gateway's API base URL, http(s)://host/v1`},
	} {
		if _, err := Load(tc.args, getenv(nil)); err == nil || err.Error() != tc.want {
			t.Errorf("%q: %v\nwant: %s", tc.args, err, tc.want)
		}
	}
}
