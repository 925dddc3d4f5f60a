package anthropic

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const (
	bedrockModel  = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
	bedrockRegion = "us-east-1"
	// testKeyID is the access key id of the test credentials; their
	// secret is the suite's key.
	testKeyID = "AKIAAGENTRUNTEST0001"
)

// keyCredentials are AWS credentials whose secret is the suite's key,
// read at every Retrieve: the stand-in for the operator's IRSA or Pod
// Identity credentials.
func keyCredentials(source model.KeySource) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		secret, err := source(ctx)
		return aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: secret, SessionToken: "session-token-of-the-test"}, err
	})
}

// bedrockSigV4 is Claude on Bedrock signing with the operator's AWS
// credentials; bedrockAPIKey the same with a Bedrock API key.
var bedrockSigV4 = onPlatform(bedrockModel, modeltest.Provider{
	Name: BedrockName,
	Dir:  "bedrock",
	New: func(c model.Config) (loop.Model, error) {
		creds := keyCredentials(c.KeySource)
		c.KeySource = nil
		return NewBedrock(c, Bedrock{Region: bedrockRegion, Credentials: creds})
	},
	// The model is in the path of Bedrock's invoke endpoint.
	Endpoint:  "/model/" + bedrockModel + "/invoke",
	RateLimit: "error_throttling.json", ServerError: "error_internal.json", Unauthorized: "error_unrecognized_client.json",
	RateLimitMessage:    "Too many requests",
	ServerErrorMessage:  "The system encountered an unexpected error",
	UnauthorizedMessage: "The security token included in the request is invalid",
	Auth:                checkSigV4,
})

var bedrockAPIKey = func() modeltest.Provider {
	p := bedrockSigV4
	p.New = func(c model.Config) (loop.Model, error) { return NewBedrock(c, Bedrock{Region: bedrockRegion}) }
	p.Auth, p.Credential = nil, ""
	p.KeyHeader = "Authorization"
	p.KeyValue = func(key string) string { return "Bearer " + key }
	return p
}()

// checkSigV4 signs the recorded request again with the test credentials
// at the time it says it was signed, and wants the same signature: the
// request was signed for bedrock in the region, over its body.
func checkSigV4(t testing.TB, secret string, r modeltest.Recorded) {
	t.Helper()
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+testKeyID+"/") || !strings.Contains(auth, "/"+bedrockRegion+"/bedrock/aws4_request") {
		t.Errorf("Authorization = %q, want a SigV4 signature for bedrock in %s", auth, bedrockRegion)
		return
	}
	if r.Header.Get("X-Amz-Security-Token") != "session-token-of-the-test" {
		t.Errorf("X-Amz-Security-Token = %q", r.Header.Get("X-Amz-Security-Token"))
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatalf("X-Amz-Date: %v", err)
	}
	req, err := http.NewRequest(r.Method, "http://"+r.Host+r.URI, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	signed := strings.Split(strings.SplitN(strings.SplitN(auth, "SignedHeaders=", 2)[1], ",", 2)[0], ";")
	for _, h := range signed {
		if h != "host" {
			req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(r.Body)
	creds := aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: secret, SessionToken: "session-token-of-the-test"}
	req.Header.Del("Authorization")
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "bedrock", bedrockRegion, at); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("Authorization"); got != auth {
		t.Errorf("the signature does not verify:\nsent %s\nwant %s", auth, got)
	}
}

func TestBedrockConformance(t *testing.T) {
	t.Run("SigV4", func(t *testing.T) { modeltest.Run(t, bedrockSigV4) })
	t.Run("APIKey", func(t *testing.T) { modeltest.Run(t, bedrockAPIKey) })
}

func TestNewBedrock_rejectsIncompleteConfig(t *testing.T) {
	creds := keyCredentials(model.StaticKey("s"))
	for name, c := range map[string]struct {
		cfg model.Config
		b   Bedrock
	}{
		"no region":           {model.Config{Model: bedrockModel}, Bedrock{Credentials: creds}},
		"no way to sign":      {model.Config{Model: bedrockModel}, Bedrock{Region: bedrockRegion}},
		"no model":            {model.Config{}, Bedrock{Region: bedrockRegion, Credentials: creds}},
		"relative VPC endpt.": {model.Config{Model: bedrockModel, BaseURL: "vpce-1.bedrock-runtime"}, Bedrock{Region: bedrockRegion, Credentials: creds}},
	} {
		if _, err := NewBedrock(c.cfg, c.b); err == nil {
			t.Errorf("%s: NewBedrock accepted it", name)
		}
	}
}

// The operator's path: the AWS default chain, here static credentials
// from the environment, signing each call.
func TestBedrock_defaultChainCredentialsFromTheEnvironment(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", testKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", modeltest.TestKey)
	t.Setenv("AWS_SESSION_TOKEN", "session-token-of-the-test")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", "")
	creds, err := AWSCredentials(context.Background(), bedrockRegion)
	if err != nil {
		t.Fatal(err)
	}
	srv := modeltest.NewServer(t, modeltest.Reply(modeltest.File(t, "response_text.json")))
	m, err := NewBedrock(model.Config{Model: bedrockModel, BaseURL: srv.URL}, Bedrock{Region: bedrockRegion, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(context.Background(), bedrockSigV4.Request()); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if r.Path != bedrockSigV4.Endpoint {
		t.Errorf("path %s, want %s", r.Path, bedrockSigV4.Endpoint)
	}
	checkSigV4(t, modeltest.TestKey, r)
}
