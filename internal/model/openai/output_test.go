package openai

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/model/modeltest"
)

// Issue 45, item 1: a request of a run with a typed output asks for
// Structured Outputs with the run's schema (response_format json_schema);
// a summary call, and a run without one, ask for text.
func TestComplete_typedOutputSendsResponseFormatJSONSchema(t *testing.T) {
	schema := `{"type":"object","properties":{"decision":{"enum":["refund","deny"]}},"required":["decision"]}`
	for _, tc := range []struct {
		name    string
		output  string
		summary bool
		want    string
	}{
		{"typed output", schema, false, `{"type":"json_schema","json_schema":{"name":"final_answer","strict":false,"schema":` + schema + `}}`},
		{"a summary call", schema, true, ""},
		{"no typed output", "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, modeltest.Reply(modeltest.File(t, "response_text.json")))
			req := billingRequest()
			req.Output, req.Summary = json.RawMessage(tc.output), tc.summary
			if _, err := f.Model.Complete(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			got := modeltest.Members(t, f.Srv.Requests()[0].Body)["response_format"]
			if tc.want == "" {
				if got != nil {
					t.Fatalf("response_format %s, want none", got)
				}
				return
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("response_format %q: %v", got, err)
			}
			_ = json.Unmarshal([]byte(tc.want), &w)
			if d := cmp.Diff(w, g); d != "" {
				t.Errorf("response_format (-want +got):\n%s", d)
			}
		})
	}
}
