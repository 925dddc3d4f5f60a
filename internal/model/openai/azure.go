package openai

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"

	sdk "github.com/openai/openai-go/v3"

	"github.com/agentrun/agentrun/internal/model"
)

// AzureName is the Azure OpenAI provider's name, as in
// spec.model.provider and in errors.
const AzureName = "azure"

// AzureScope is the Entra ID scope of Azure OpenAI (Azure AI Foundry)
// tokens.
const AzureScope = "https://cognitiveservices.azure.com/.default"

// Azure is where an Azure OpenAI deployment is and how it is reached.
// The deployment is the model name of the configuration: the SDK's Azure
// client puts it in the path (/openai/deployments/NAME/chat/completions).
type Azure struct {
	// Endpoint is the resource's endpoint, such as
	// https://RESOURCE.openai.azure.com. Required.
	Endpoint string
	// APIVersion is the api-version query parameter. Required.
	APIVersion string
	// Credential supplies Entra ID tokens (the operator's workload
	// identity) when the configuration has no KeySource; with a
	// KeySource, the key is sent as Azure's api-key header instead.
	Credential azcore.TokenCredential
}

// NewAzure returns a provider for an Azure OpenAI deployment, built on
// the OpenAI SDK's Azure client. cfg.BaseURL is not used: the endpoint
// is a.Endpoint.
func NewAzure(cfg model.Config, a Azure) (*Model, error) {
	u, err := url.Parse(a.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%s: endpoint %q is not an absolute http(s) URL", AzureName, a.Endpoint)
	}
	if a.APIVersion == "" {
		return nil, fmt.Errorf("%s: no api-version configured", AzureName)
	}
	if cfg.KeySource == nil && a.Credential == nil {
		return nil, fmt.Errorf("%s: neither an API key nor an Entra ID credential configured", AzureName)
	}
	cfg.BaseURL = ""
	caller, err := model.NewCaller(AzureName, cfg)
	if err != nil {
		return nil, err
	}
	cfg = caller.Config()
	endpoint := strings.TrimSuffix(a.Endpoint, "/") + "/"
	opts := []option.RequestOption{
		azure.WithEndpoint(endpoint, a.APIVersion),
		option.WithMaxRetries(cfg.MaxRetries),
	}
	if u.Scheme == "http" {
		// Only for an endpoint the manifest names as http (a local
		// proxy): the SDK otherwise refuses to send a token in clear.
		opts = append(opts, azure.WithUnsafeAllowHTTP())
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	key := model.ClientKey{Provider: AzureName, BaseURL: endpoint + "?api-version=" + a.APIVersion, MaxRetries: cfg.MaxRetries, HTTPClient: cfg.HTTPClient}
	client := model.SharedClient(cfg.Clients, key, func() *sdk.Client { c := sdk.NewClient(opts...); return &c })
	m := &Model{name: AzureName, caller: caller, client: client,
		auth: func(key string) []option.RequestOption { return []option.RequestOption{azure.WithAPIKey(key)} }}
	if cfg.KeySource == nil {
		cred := a.Credential
		m.credential = func(ctx context.Context) (string, error) {
			tok, err := cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{AzureScope}})
			return tok.Token, err
		}
		m.auth = func(token string) []option.RequestOption {
			return []option.RequestOption{azure.WithTokenCredential(fetchedToken(token))}
		}
	}
	return m, nil
}

// fetchedToken is the Entra ID token fetched for one call (by
// Caller.DoWith, from the configured credential, which caches it),
// handed to the SDK's token credential authentication.
type fetchedToken string

func (t fetchedToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	// The SDK only needs the token for this one call; an expiry a few
	// minutes out keeps its policy from asking again during it.
	return azcore.AccessToken{Token: string(t), ExpiresOn: time.Now().Add(10 * time.Minute)}, nil
}
