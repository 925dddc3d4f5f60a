package localrun

import (
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
)

// The prompt shows the arguments a person approves whole, with their
// digest: not cut at 2,000 characters, and with the spaces inside strings
// as the call will send them.
func TestRun_askShowsTheArgumentsWhole(t *testing.T) {
	note := strings.Repeat("refund  for the double charge; ", 120) // 3,720 characters
	manifest := strings.Replace(readTestdata(t, "ask-run.yaml"), "{amount_minor: 8240}", `{amount_minor: 8240, note: "`+note+`"}`, 1)
	r := run(t, manifest, Options{JSON: true, Interactive: true, Stdin: strings.NewReader("deny\n")})
	args := `{"amount_minor":8240,"note":"` + note + `"}`
	mustContain(t, "stderr", r.stderr, "arguments ("+loop.ArgumentsDigest([]byte(args))+"): "+args+"\n")
}
