package kit

import (
	"context"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/aws/aws-sdk-go-v2/aws"
	"golang.org/x/oauth2"

	"github.com/agentrun/agentrun/internal/model/anthropic"
)

// cloudIdentities are the process's own cloud identities, which runs of
// providers bedrock (without an API key), vertex and azure (without an
// API key) call as. Each is found once per Builder (the operator's lives
// as long as the process), when a run first needs it, and shared by every
// run it builds: the credential libraries cache the tokens and refresh
// them before they expire. A lookup that fails is tried again by the next
// call, so an identity set up after the operator started is picked up.
// The zero value is ready.
type cloudIdentities struct {
	mu     sync.Mutex
	aws    map[string]aws.CredentialsProvider // by region
	google oauth2.TokenSource
	azure  azcore.TokenCredential
}

// awsCredentials is the AWS default chain (IRSA, EKS Pod Identity, the
// instance role) for region.
func (cloud *cloudIdentities) awsCredentials(ctx context.Context, region string) (aws.CredentialsProvider, error) {
	cloud.mu.Lock()
	defer cloud.mu.Unlock()
	if c, ok := cloud.aws[region]; ok {
		return c, nil
	}
	c, err := anthropic.AWSCredentials(context.WithoutCancel(ctx), region)
	if err != nil {
		return nil, fmt.Errorf("the operator's AWS credentials: %w", err)
	}
	if cloud.aws == nil {
		cloud.aws = map[string]aws.CredentialsProvider{}
	}
	cloud.aws[region] = c
	return c, nil
}

// googleTokens is Google's Application Default Credentials (GKE Workload
// Identity), found at the first token asked for.
func (cloud *cloudIdentities) googleTokens() oauth2.TokenSource {
	cloud.mu.Lock()
	defer cloud.mu.Unlock()
	if cloud.google == nil {
		cloud.google = &lazyGoogle{}
	}
	return cloud.google
}

type lazyGoogle struct {
	mu sync.Mutex
	ts oauth2.TokenSource
}

func (l *lazyGoogle) Token() (*oauth2.Token, error) {
	l.mu.Lock()
	if l.ts == nil {
		ts, err := anthropic.GoogleTokenSource(context.Background())
		if err != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("the operator's Google credentials: %w", err)
		}
		l.ts = ts
	}
	ts := l.ts
	l.mu.Unlock()
	return ts.Token()
}

// azureCredential is azidentity's DefaultAzureCredential (Workload
// Identity's federated token, a managed identity ...).
func (cloud *cloudIdentities) azureCredential() (azcore.TokenCredential, error) {
	cloud.mu.Lock()
	defer cloud.mu.Unlock()
	if cloud.azure != nil {
		return cloud.azure, nil
	}
	c, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("the operator's Entra ID credential: %w", err)
	}
	cloud.azure = c
	return c, nil
}
