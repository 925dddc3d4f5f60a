package anthropic

import (
	"context"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2/bedrock"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/agentrun/agentrun/internal/model"
)

// BedrockName is the Amazon Bedrock provider's name, as in
// spec.model.provider and in errors.
const BedrockName = "bedrock"

// BedrockVersion is the anthropic_version Bedrock documents for the
// Messages API body.
const BedrockVersion = "bedrock-2023-05-31"

// Bedrock is where Claude on Amazon Bedrock is called and as whom.
type Bedrock struct {
	// Region is the AWS region of the bedrock-runtime endpoint, such as
	// us-east-1. Required.
	Region string
	// Credentials sign every request (SigV4, service bedrock) when the
	// configuration has no KeySource: in the operator, the AWS default
	// chain (IRSA's web identity, EKS Pod Identity), cached by the SDK.
	// With a KeySource, the key is a Bedrock API key, sent as a bearer
	// token instead.
	Credentials aws.CredentialsProvider
}

// NewBedrock returns a provider for Claude on Amazon Bedrock, through the
// Anthropic SDK's Bedrock client: the model (a model id or an inference
// profile, such as us.anthropic.claude-sonnet-4-5-20250929-v1:0) goes in
// the path of the invoke endpoint, and each request is signed. cfg.BaseURL,
// when set, replaces https://bedrock-runtime.REGION.amazonaws.com (a VPC
// endpoint).
func NewBedrock(cfg model.Config, b Bedrock) (*Model, error) {
	if b.Region == "" {
		return nil, fmt.Errorf("%s: no region configured", BedrockName)
	}
	if cfg.KeySource == nil && b.Credentials == nil {
		return nil, fmt.Errorf("%s: neither an API key nor AWS credentials configured", BedrockName)
	}
	caller, err := model.NewCaller(BedrockName, cfg)
	if err != nil {
		return nil, err
	}
	cfg = caller.Config()
	m := &Model{name: BedrockName, caller: caller, client: platformClient(BedrockName, cfg)}
	platform := func(c aws.Config) []option.RequestOption {
		opts := []option.RequestOption{bedrock.WithConfig(c), option.WithJSONSet("anthropic_version", BedrockVersion)}
		if cfg.BaseURL != "" {
			opts = append(opts, option.WithBaseURL(cfg.BaseURL))
		}
		return opts
	}
	if cfg.KeySource != nil {
		m.auth = func(_ context.Context, key string) []option.RequestOption {
			return platform(aws.Config{
				Region:                  b.Region,
				BearerAuthTokenProvider: bedrock.NewStaticBearerTokenProvider(key),
				AuthSchemePreference:    []string{"httpBearerAuth"},
			})
		}
		return m, nil
	}
	// The credentials fetched before a call are the ones that sign its
	// attempts: Caller.DoWith reports a failure to get them without
	// sending anything, and scrubs the secret from every error.
	m.credential = func(ctx context.Context) (string, error) {
		c, err := b.Credentials.Retrieve(ctx)
		if err != nil {
			return "", err
		}
		if held, ok := ctx.Value(fetchedKey{}).(*aws.Credentials); ok {
			*held = c
		}
		return c.SecretAccessKey, nil
	}
	m.auth = func(ctx context.Context, _ string) []option.RequestOption {
		held, _ := ctx.Value(fetchedKey{}).(*aws.Credentials)
		if held == nil {
			held = &aws.Credentials{}
		}
		return platform(aws.Config{Region: b.Region, Credentials: credentials.StaticCredentialsProvider{Value: *held}})
	}
	return m, nil
}

// fetchedKey is the context key of the place where a call's credentials
// are kept between Caller.DoWith fetching them and the call signing with
// them (see Complete).
type fetchedKey struct{}

// platformClient is the SDK client a cloud platform's calls share; the
// platform's endpoint and authentication are added to each call.
func platformClient(name string, cfg model.Config) *sdk.Client {
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	key := model.ClientKey{Provider: name, MaxRetries: cfg.MaxRetries, HTTPClient: cfg.HTTPClient}
	return model.SharedClient(cfg.Clients, key, func() *sdk.Client { c := sdk.NewClient(opts...); return &c })
}

// AWSCredentials is the operator's AWS identity: the SDK's default chain
// (the environment, IRSA's web identity token, EKS Pod Identity's
// container credentials, the instance role), cached by the SDK and
// refreshed before they expire. The region is the run's, so that
// credentials that need one (STS) get it.
func AWSCredentials(ctx context.Context, region string) (aws.CredentialsProvider, error) {
	c, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, err
	}
	if c.Credentials == nil {
		return nil, fmt.Errorf("no AWS credentials found")
	}
	return c.Credentials, nil
}
