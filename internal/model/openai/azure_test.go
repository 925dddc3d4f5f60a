package openai

import (
	"context"
	"net/url"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/modeltest"
)

const azureAPIVersion = "2024-10-21"

// keyCredential is an Entra ID credential that hands out the suite's key
// as its token, reading it at every GetToken: the stand-in for the
// operator's workload identity.
type keyCredential struct {
	source model.KeySource
	scopes *[]string
}

func (c keyCredential) GetToken(ctx context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	if c.scopes != nil {
		*c.scopes = o.Scopes
	}
	key, err := c.source(ctx)
	return azcore.AccessToken{Token: key}, err
}

// azureEntra is the Azure provider authenticating with Entra ID tokens:
// the suite's key source stands in for the credential.
var azureEntra = func() modeltest.Provider {
	p := provider
	p.Name = AzureName
	p.Dir = "azure"
	p.New = func(c model.Config) (loop.Model, error) {
		cred := keyCredential{source: c.KeySource}
		c.KeySource = nil
		return NewAzure(c, Azure{Endpoint: c.BaseURL, APIVersion: azureAPIVersion, Credential: cred})
	}
	p.Path = ""
	// The deployment is the model name.
	p.Endpoint = "/openai/deployments/" + modelName + "/chat/completions"
	p.RateLimitMessage = "Requests to the ChatCompletions_Create Operation"
	p.ServerErrorMessage = "The service is temporarily unable"
	p.UnauthorizedMessage = "Access denied due to invalid subscription key"
	p.Credential = "credentials"
	return p
}()

// azureKey is the same deployment called with an API key, which Azure
// takes in its api-key header.
var azureKey = func() modeltest.Provider {
	p := azureEntra
	p.New = func(c model.Config) (loop.Model, error) {
		return NewAzure(c, Azure{Endpoint: c.BaseURL, APIVersion: azureAPIVersion})
	}
	p.Credential = ""
	p.KeyHeader = "Api-Key"
	p.KeyValue = func(key string) string { return key }
	return p
}()

func TestAzureConformance(t *testing.T) {
	t.Run("EntraID", func(t *testing.T) { modeltest.Run(t, azureEntra) })
	t.Run("APIKey", func(t *testing.T) { modeltest.Run(t, azureKey) })
}

func TestAzure_sendsTheAPIVersionAndAsksForTheCognitiveServicesScope(t *testing.T) {
	var scopes []string
	srv := modeltest.NewServer(t, modeltest.Reply(modeltest.File(t, "response_text.json")))
	m, err := NewAzure(model.Config{Model: modelName},
		Azure{Endpoint: srv.URL + "/", APIVersion: azureAPIVersion, Credential: keyCredential{source: model.StaticKey("entra-token"), scopes: &scopes}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(context.Background(), billingRequest()); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	q, _ := url.ParseQuery(r.Query)
	if q.Get("api-version") != azureAPIVersion {
		t.Errorf("query %q, want api-version=%s", r.Query, azureAPIVersion)
	}
	if len(scopes) != 1 || scopes[0] != AzureScope {
		t.Errorf("the token was asked for scopes %q, want %q", scopes, AzureScope)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer entra-token" {
		t.Errorf("Authorization = %q", got)
	}
}

func TestNewAzure_rejectsIncompleteConfig(t *testing.T) {
	cred := keyCredential{source: model.StaticKey("t")}
	for name, a := range map[string]Azure{
		"no endpoint":      {APIVersion: azureAPIVersion, Credential: cred},
		"relative":         {Endpoint: "northwind.openai.azure.com", APIVersion: azureAPIVersion, Credential: cred},
		"no api version":   {Endpoint: "https://northwind.openai.azure.com", Credential: cred},
		"no way to log in": {Endpoint: "https://northwind.openai.azure.com", APIVersion: azureAPIVersion},
	} {
		if _, err := NewAzure(model.Config{Model: modelName}, a); err == nil {
			t.Errorf("%s: NewAzure accepted %+v", name, a)
		}
	}
}
