package v1alpha1_test

import (
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

func TestParseEscalationAck(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    v1alpha1.EscalationAck
		wantErr string
	}{
		{value: "ack", want: v1alpha1.EscalationAck{}},
		{value: " RESOLVE ", want: v1alpha1.EscalationAck{Resolve: true}},
		{value: "ack: looking at it ", want: v1alpha1.EscalationAck{Note: "looking at it"}},
		{value: "resolve:rolled back: by hand", want: v1alpha1.EscalationAck{Resolve: true, Note: "rolled back: by hand"}},
		{value: "take", wantErr: `"take" is not an acknowledgement`},
		{value: "", wantErr: "is not an acknowledgement"},
		{value: "ack:" + strings.Repeat("é", v1alpha1.MaxAckNote+1), wantErr: "a note may have at most 1024"},
	} {
		got, err := v1alpha1.ParseEscalationAck(tc.value)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("v1alpha1.ParseEscalationAck(%.20q) = %v, want an error with %q", tc.value, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("v1alpha1.ParseEscalationAck(%q) = %+v, %v; want %+v", tc.value, got, err, tc.want)
		}
		// What String writes reads back the same.
		if again, err := v1alpha1.ParseEscalationAck(got.String()); err != nil || again != got {
			t.Errorf("%q read back as %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}
