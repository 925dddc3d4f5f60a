package kit

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
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
// its zero rule, refuses a negative value, and is documented in docs/api.md's manifest and its list
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

			var value, zero, negative, want string
			switch row.Unit {
			case loop.UnitCount:
				value, zero, negative, want = "7", "0", "-7", "7"
			case loop.UnitDuration:
				value, zero, negative, want = `"7s"`, `"0s"`, `"-7s"`, itoa(int64(7*time.Second))
			case loop.UnitUSD:
				value, zero, negative, want = `"7"`, `"0"`, `"-7"`, itoa(int64(loop.MustMoney("7")))
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
			// Below zero is never a ceiling: refused, not read as unset (the
			// default) as the engine would read it.
			if _, err := Config(spec(negative)); err == nil || !strings.Contains(err.Error(), "budget."+row.Field) {
				t.Errorf("budget.%s: %s = %v, want a refusal naming the field", row.Field, negative, err)
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

// The other places that name every ceiling are tied to the table too: a
// ceiling added to loop.Ceilings fails here until budget.soft's bound, the
// API's BudgetDimension constants and BudgetSpec's comment (its defaults
// and zero rules), docs/api.md
// (status.limits, the headroom's keys, the zero rules, the ceilings a
// platform's limit fills) and README.md's budgets name it.
func TestCeilings_everyListNamesEveryRow(t *testing.T) {
	rows := loop.Ceilings()
	budget := testenv.AgentRunSchema(t).Properties["spec"].Properties["budget"]
	if got := budget.Properties["soft"].MaxItems; got == nil || *got != int64(len(rows)) {
		t.Errorf("budget.soft's MaxItems is not one per ceiling (%d)", len(rows))
	}

	var dims, consts []string
	for _, row := range rows {
		dims = append(dims, string(row.Dim))
	}
	file, err := parser.ParseFile(token.NewFileSet(), "../../api/v1alpha1/budget_types.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var spec string // BudgetSpec's comment
	ast.Inspect(file, func(n ast.Node) bool {
		if d, ok := n.(*ast.GenDecl); ok && len(d.Specs) == 1 {
			if ty, ok := d.Specs[0].(*ast.TypeSpec); ok && ty.Name.Name == "BudgetSpec" {
				spec = d.Doc.Text()
			}
		}
		if v, ok := n.(*ast.ValueSpec); ok {
			if ty, ok := v.Type.(*ast.Ident); ok && ty.Name == "BudgetDimension" {
				for _, val := range v.Values {
					if lit, ok := val.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						consts = append(consts, s)
					}
				}
			}
		}
		return true
	})
	if diff := cmp.Diff(dims, consts); diff != "" {
		t.Errorf("the table of ceilings and the API's BudgetDimension constants differ (-table +API):\n%s", diff)
	}

	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	api, readme := read("../../docs/api.md"), read("../../README.md")
	_, status, _ := strings.Cut(api, "\nstatus:\n")
	_, limits, _ := strings.Cut(status, "\n  limits:")
	limits, _, _ = strings.Cut(limits, "\n    approvalTimeout:")
	_, budgets, _ := strings.Cut(readme, "\n## Budgets\n")
	budgets, _, _ = strings.Cut(budgets, "\n## ")
	headroom := clause(api, "`status.convergence.headroom` is keyed by", "not `costUSD`")

	var zero, nonzero, defaulted []string
	for _, row := range rows {
		if !slices.Contains(budget.Required, row.Field) {
			defaulted = append(defaulted, row.Field)
		}
		if row.ZeroIsALimit {
			zero = append(zero, row.Field)
		} else {
			nonzero = append(nonzero, row.Field)
		}
		t.Run(string(row.Dim), func(t *testing.T) {
			for _, l := range []struct{ where, text, name string }{
				{"BudgetSpec's comment", spec, row.Field},
				{"docs/api.md's status.limits", limits, row.Field + ":"},
				{"docs/api.md's keys of status.convergence.headroom", headroom, "`" + string(row.Dim) + "`"},
				{"README.md's Budgets", budgets, "`" + row.Field + "`"},
			} {
				if !strings.Contains(l.text, l.name) {
					t.Errorf("%s does not name the %s ceiling (%s)", l.where, row.Dim, strings.TrimSpace(l.name))
				}
			}
		})
	}
	// Where zero is a real limit, and where it is refused.
	for _, l := range []struct {
		where, text string
		names       []string
	}{
		{"BudgetSpec's comment: the defaults", clause(spec, "Defaults:", "has no default"), defaulted},
		{"BudgetSpec's comment: where zero is a limit", clause(spec, "zero where zero is a limit", ")"), zero},
		{"BudgetSpec's comment: where zero is refused", clause(spec, "refused where it could only stop every run at once", ")"), nonzero},
		{"docs/api.md: where zero is a real limit", clause(api, "Zero is a real limit for", ":"), zero},
		{"docs/api.md: where zero is refused", clause(api, "Zero is refused with a message where it could only stop every run at once", "("), nonzero},
		{"README.md: where zero means zero", clause(budgets, "zero means zero, never the default", "(the first step"), zero},
		{"README.md: where zero is refused", clause(budgets, "zero could only stop every run at once", ")"), nonzero},
		{"docs/api.md: the ceilings with no default in the CRD", clause(api, "A ceiling or timeout a limit caps", ")"), defaulted},
	} {
		for _, n := range l.names {
			if !strings.Contains(l.text, n) {
				t.Errorf("%s does not name %s", l.where, n)
			}
		}
	}
}

// clause is text from intro up to the first end after it, its white space
// folded, so that a list may break across lines; "" when intro is absent.
func clause(text, intro, end string) string {
	text = strings.Join(strings.Fields(text), " ")
	_, after, ok := strings.Cut(text, intro)
	if !ok {
		return ""
	}
	before, _, _ := strings.Cut(after, end)
	return before
}
