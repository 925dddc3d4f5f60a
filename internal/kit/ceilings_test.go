package kit

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/testenv"
)

// The engine's table of ceilings (loop.Ceilings) is the one list: every
// row has its field in the CRD's budget and its name in budget.soft's enum
// (in the table's order), is converted from a manifest by Config, follows
// its zero rule, and is documented in docs/api.md's manifest and its list
// of soft names. A ceiling added to the table fails here until every layer
// has it.
func TestCeilings_everyLayerHasEveryRow(t *testing.T) {
	budget := testenv.AgentRunSchema(t).Properties["spec"].Properties["budget"]
	var soft []string
	for _, v := range budget.Properties["soft"].Items.Schema.Enum {
		soft = append(soft, strings.Trim(string(v.Raw), `"`))
	}
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, manifest, _ := strings.Cut(string(doc), "\n  budget:")
	manifest, _, _ = strings.Cut(manifest, "\n  loopDetection:")

	var dims []string
	for _, row := range loop.Ceilings() {
		dims = append(dims, string(row.Dim))
		t.Run(string(row.Dim), func(t *testing.T) {
			if _, ok := budget.Properties[row.Field]; !ok {
				t.Errorf("the CRD's spec.budget has no %s", row.Field)
			}
			if !strings.Contains(manifest, "\n    "+row.Field+":") {
				t.Errorf("docs/api.md's manifest does not show budget.%s", row.Field)
			}

			var value, zero, want string
			switch row.Unit {
			case loop.UnitCount:
				value, zero, want = "7", "0", "7"
			case loop.UnitDuration:
				value, zero, want = `"7s"`, `"0s"`, itoa(int64(7*time.Second))
			case loop.UnitUSD:
				value, zero, want = `"7"`, `"0"`, itoa(int64(loop.MustMoney("7")))
			default:
				t.Fatalf("unit %q has no conversion test", row.Unit)
			}
			spec := func(v string) *v1alpha1.AgentRunSpec {
				s := &v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Goal: "g"}}
				fields := `{"maxTurns": 3, "` + row.Field + `": ` + v + `}`
				if err := json.Unmarshal([]byte(fields), &s.Budget); err != nil {
					t.Fatalf("%s: %v", fields, err)
				}
				return s
			}
			cfg, err := Config(spec(value))
			if err != nil {
				t.Fatalf("budget.%s: %s refused: %v", row.Field, value, err)
			}
			cfg = cfg.Normalize()
			if got := itoa(row.Limit(&cfg.Budget)); got != want {
				t.Errorf("budget.%s: %s became a %s ceiling of %s, want %s", row.Field, value, row.Dim, got, want)
			}
			cfg, err = Config(spec(zero))
			cfg = cfg.Normalize()
			switch {
			case row.ZeroIsALimit && err != nil:
				t.Errorf("budget.%s: %s refused, but zero is a real limit: %v", row.Field, zero, err)
			case row.ZeroIsALimit && row.Limit(&cfg.Budget) != 0:
				t.Errorf("budget.%s: %s became %d, not zero", row.Field, zero, row.Limit(&cfg.Budget))
			case !row.ZeroIsALimit && (err == nil || !strings.Contains(err.Error(), "budget."+row.Field)):
				t.Errorf("budget.%s: %s = %v, want a refusal naming the field", row.Field, zero, err)
			}
		})
	}
	if diff := cmp.Diff(dims, soft); diff != "" {
		t.Errorf("the table of ceilings and the CRD's budget.soft enum differ (-table +CRD):\n%s", diff)
	}
	listed := "(" + strings.Join(dims, ", ") + ")"
	if !strings.Contains(manifest, "soft: []") || !strings.Contains(manifest, listed) {
		t.Errorf("docs/api.md's budget.soft line does not name the ceilings %s", listed)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
