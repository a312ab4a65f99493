package lambdaenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// secrets is a stand-in for Secrets Manager, which cannot run here.
type secrets map[string]string

func (s secrets) GetSecretValue(_ context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	v, ok := s[aws.ToString(in.SecretId)]
	if !ok {
		return nil, errors.New("ResourceNotFoundException")
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(v)}, nil
}

const secret = "0123456789abcdef0123456789abcdef"

func env(m map[string]string) Env { return func(k string) string { return m[k] } }

func TestLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sm := secrets{"arn:aws:secretsmanager:eu-west-1:1:secret:listener": secret}
	base := func() map[string]string {
		return map[string]string{
			EnvTable: "c0mpute", EnvConnectionsURL: "https://abc.execute-api.eu-west-1.amazonaws.com/prod",
			EnvRelayURL: "wss://abc.execute-api.eu-west-1.amazonaws.com/prod", EnvListenerSecret: "arn:aws:secretsmanager:eu-west-1:1:secret:listener",
		}
	}
	with := func(k, v string) map[string]string {
		m := base()
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"from Secrets Manager", base(), ""},
		{"from a file", func() map[string]string { m := with(EnvListenerSecret, ""); m[EnvListenerFile] = file; return m }(), ""},
		{"both secret sources", with(EnvListenerFile, file), "not both"},
		{"no secret", with(EnvListenerSecret, ""), EnvListenerSecret},
		{"unknown secret", with(EnvListenerSecret, "arn:nope"), "ResourceNotFoundException"},
		{"short secret", func() map[string]string {
			m := base()
			m[EnvListenerSecret] = "arn:short"
			return m
		}(), "min"},
		{"no table", with(EnvTable, ""), EnvTable},
		{"bad connections url", with(EnvConnectionsURL, "not a url"), EnvConnectionsURL},
		{"relay not websocket", with(EnvRelayURL, "https://abc/prod"), EnvRelayURL},
		{"bad log level", with(EnvLogLevel, "loud"), EnvLogLevel},
		{"bad rate", with(EnvRatePerMinute, "ten"), EnvRatePerMinute},
		{"share above 100", with(EnvWorkerSharePct, "101"), EnvWorkerSharePct},
	}
	sm["arn:short"] = "short"
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := LoadAPI(context.Background(), env(c.env), sm)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("LoadAPI: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("LoadAPI error %v, want one mentioning %q", err, c.wantErr)
			case c.wantErr == "" && got.ListenerSecret != secret:
				t.Fatalf("secret %q, want %q", got.ListenerSecret, secret)
			}
		})
	}
}

func TestLoadRelayBatchWindow(t *testing.T) {
	m := map[string]string{EnvTable: "t", EnvConnectionsURL: "https://x/prod", EnvListenerSecret: "arn"}
	sm := secrets{"arn": secret}
	c, err := LoadRelay(context.Background(), env(m), sm)
	if err != nil || c.BatchWindow != defaultBatchWindow {
		t.Fatalf("default: %v, %v", c.BatchWindow, err)
	}
	m[EnvBatchWindowMS] = "0"
	if c, err = LoadRelay(context.Background(), env(m), sm); err != nil || c.BatchWindow != 0 {
		t.Fatalf("0 ms: %v, %v", c.BatchWindow, err)
	}
	m[EnvBatchWindowMS] = "5000"
	if _, err = LoadRelay(context.Background(), env(m), sm); err == nil || !strings.Contains(err.Error(), EnvBatchWindowMS) {
		t.Fatalf("5 s window: %v, want an error naming %s", err, EnvBatchWindowMS)
	}
}

// TestRPCURL: the RPC URL comes from its secret as deployed (it may carry a
// paid endpoint's key), or plainly in development; an empty secret says
// how to fill it.
func TestRPCURL(t *testing.T) {
	const arn = "arn:aws:secretsmanager:eu-west-1:1:secret:rpc"
	for _, c := range []struct {
		name    string
		env     map[string]string
		sm      secrets
		want    string
		wantErr string
	}{
		{"from the secret", map[string]string{EnvRPCURLSecret: arn}, secrets{arn: " https://rpc.example/?key=k\n"}, "https://rpc.example/?key=k", ""},
		{"plain", map[string]string{EnvRPCURL: "http://127.0.0.1:8899"}, secrets{}, "http://127.0.0.1:8899", ""},
		{"neither", map[string]string{}, secrets{}, "", ""},
		{"both", map[string]string{EnvRPCURLSecret: arn, EnvRPCURL: "http://x"}, secrets{arn: "https://rpc.example"}, "", "not both"},
		{"secret without a value", map[string]string{EnvRPCURLSecret: arn}, secrets{arn: ""}, "", "put-secret-value --secret-id " + arn},
		{"unreadable secret", map[string]string{EnvRPCURLSecret: arn}, secrets{}, "", "ResourceNotFoundException"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := env(c.env).RPCURL(context.Background(), c.sm)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("RPCURL = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
