package keepercli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// SecretSource fetches a secret string by name (Secrets Manager or SSM).
type SecretSource func(ctx context.Context, kind, name string) (string, error)

// AWSSecrets reads secrets with the default AWS credential chain.
func AWSSecrets(ctx context.Context, kind, name string) (string, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("aws config: %w", err)
	}
	switch kind {
	case "secretsmanager":
		out, err := secretsmanager.NewFromConfig(cfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name)})
		var missing *smtypes.ResourceNotFoundException
		if errors.As(err, &missing) || err == nil && strings.TrimSpace(aws.ToString(out.SecretString)) == "" {
			// Terraform creates the secret empty and never sees the key.
			return "", fmt.Errorf("the secret has no value yet; put the keeper's keypair in it: "+
				"aws secretsmanager put-secret-value --secret-id %s --secret-string file://keeper-key.json", name)
		}
		if err != nil {
			return "", err
		}
		return aws.ToString(out.SecretString), nil
	case "ssm":
		out, err := ssm.NewFromConfig(cfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
		if err != nil {
			return "", err
		}
		if out.Parameter == nil {
			return "", errors.New("empty parameter")
		}
		return aws.ToString(out.Parameter.Value), nil
	}
	return "", fmt.Errorf("unknown secret kind %q", kind)
}

// LoadKey loads the signing key named by ref. The key's bytes never appear
// in an error.
func LoadKey(ctx context.Context, ref string, secrets SecretSource) (solana.PrivateKey, error) {
	kind, name, ok := strings.Cut(ref, ":")
	if !ok || name == "" {
		// The reference is not echoed: it may be a key pasted in.
		return nil, fmt.Errorf("keeper: key reference (%d characters): want file:PATH, secretsmanager:SECRET-ID or ssm:PARAMETER-NAME", len(ref))
	}
	var raw string
	switch kind {
	case "file":
		st, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("keeper: key file: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("keeper: key file %s is readable by others (mode %o); chmod 600 it", name, st.Mode().Perm())
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("keeper: key file: %w", err)
		}
		raw = string(b)
	case "secretsmanager", "ssm":
		if secrets == nil {
			return nil, errors.New("keeper: no secret source")
		}
		s, err := secrets(ctx, kind, name)
		if err != nil {
			return nil, fmt.Errorf("keeper: key from %s %s: %w", kind, name, err)
		}
		raw = s
	default:
		return nil, fmt.Errorf("keeper: key reference kind %q: want file, secretsmanager or ssm", kind)
	}
	k, err := onchain.ParseKey(raw)
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	return k, nil
}
