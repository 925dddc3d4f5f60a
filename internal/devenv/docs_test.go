package devenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/testenv"
)

// docScenarios are what TestDocs_commandsPrintWhatTheDocsShow runs, in
// this order: the samples each applies before its blocks' commands run,
// in the docs' order. A sample applied again is left as it is.
var docScenarios = []docScenario{
	// README's worked example: four runs ending four ways.
	{"samples", []string{"01-double-charge.yaml", "02-refund-approval.yaml", "04-login-page-loop.yaml", "06-cost-ceiling.yaml"}},
	{"approvals", []string{"02-refund-approval.yaml"}},
	// The plugin's answers, cancel, watch and transcript.
	{"answers", []string{"03-declined-refund.yaml"}},
	{"templates", []string{"12-template.yaml"}},
	{"schedules", []string{"13-schedule.yaml"}},
	// kubectl agentrun eval of the sample evaluation.
	{"evaluations", []string{"12-template.yaml", "15-evaluation.yaml", "16-evaluation-judged.yaml"}},
	// docs/gitops.md's way out of a refused re-run.
	{"gitops", nil},
	// docs/local.md: agentrun local, with no cluster.
	{"local", nil},
}

type docScenario struct {
	name    string
	samples []string
}

// docSetup prepares what a scenario's docs start from that no sample
// makes, before its blocks run.
var docSetup = map[string]func(ctx context.Context, t *testing.T, c client.Client){
	"gitops": recreatedWithAnotherSpec,
}

// nightlyTriage is a run a GitOps tool applies, with goal as its goal.
func nightlyTriage(goal string) *v1alpha1.AgentRun {
	return &v1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly-triage", Namespace: "default",
			Labels: map[string]string{"argocd.argoproj.io/instance": "triage"}},
		Spec: v1alpha1.AgentRunSpec{
			AgentSpec: v1alpha1.AgentSpec{
				Goal: goal,
				Model: v1alpha1.ModelSpec{
					ModelEndpoint: v1alpha1.ModelEndpoint{Provider: "scripted"},
					Script:        []v1alpha1.ScriptStep{{Content: "Two jobs failed on a full disk."}},
				},
				Budget: v1alpha1.BudgetSpec{MaxTurns: 2},
			},
		},
	}
}

// recreatedWithAnotherSpec does what Argo CD does with Replace=true after
// a run's goal is edited in Git: the protected run nightly-triage runs,
// is deleted, and is created again with another goal.
func recreatedWithAnotherSpec(ctx context.Context, t *testing.T, c client.Client) {
	g := NewWithT(t)
	first := nightlyTriage("Triage last night's failed jobs.")
	g.Expect(c.Create(ctx, first)).To(Succeed())
	g.Eventually(func() v1alpha1.Phase {
		_ = c.Get(ctx, client.ObjectKeyFromObject(first), first)
		return first.Status.Phase
	}, time.Minute, 100*time.Millisecond).Should(Equal(v1alpha1.PhaseSucceeded))
	g.Expect(c.Delete(ctx, first)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(first), &v1alpha1.AgentRun{}))
	}, time.Minute, 100*time.Millisecond).Should(BeTrue())
	g.Expect(c.Create(ctx, nightlyTriage("Triage last night's failed jobs and open a ticket for each."))).To(Succeed())
}

func knownScenario(name string) bool {
	return slices.ContainsFunc(docScenarios, func(s docScenario) bool { return s.name == name })
}

// docsRunElsewhere are the scenarios of the docs that tests of other
// packages run, each with the test that does.
var docsRunElsewhere = map[string]string{
	// agentrun archive's commands, against a PostgreSQL archive.
	"archive": "TestArchive_docsPrintWhatTheyShow (cmd/agentrun)",
}

// docBlocks reads every command block of README.md and docs/*.md.
func docBlocks(t *testing.T, root string) []testenv.DocBlock {
	t.Helper()
	blocks, err := testenv.DocBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// Every command block in README.md and docs/*.md is run by a test, which
// checks what it prints against what the docs show, or says why not.
func TestDocs_everyCommandBlockIsRunOrSaysWhyNot(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, root)
	if len(blocks) < 20 {
		t.Fatalf("found %d command blocks in the docs; the reader of fences is broken", len(blocks))
	}
	run := map[string]int{}
	for _, b := range blocks {
		switch reason, notRun := strings.CutPrefix(b.Mark, "not run: "); {
		case b.Mark == "":
			t.Errorf("%s:%d: a command block without <!-- docs-test: SCENARIO --> or <!-- docs-test: not run: REASON --> above it", b.File, b.Line)
		case notRun && len(strings.TrimSpace(reason)) < 10:
			t.Errorf("%s:%d: %q does not say why the block is not run", b.File, b.Line, b.Mark)
		case !notRun && !knownScenario(b.Mark) && docsRunElsewhere[b.Mark] == "":
			t.Errorf("%s:%d: no scenario %q in docScenarios", b.File, b.Line, b.Mark)
		case !notRun && !b.Prompt:
			t.Errorf("%s:%d: a block run by scenario %s must show its commands as \"$ command\" with their output", b.File, b.Line, b.Mark)
		case !notRun:
			run[b.Mark]++
		}
	}
	for _, sc := range docScenarios {
		if run[sc.name] == 0 {
			t.Errorf("scenario %s runs no block of the docs", sc.name)
		}
	}
	for name, by := range docsRunElsewhere {
		if run[name] == 0 {
			t.Errorf("no block of the docs is marked %s, which %s runs", name, by)
		}
	}
}

// What varies from one run of the docs' commands to the next: times, ages,
// generated name suffixes, resource versions, the user that answered, a
// checkpoint's seal, a run's wall clock and durations, the directory
// agentrun local runs tools in, a spec's hash (it changes with
// the CRD's defaults).
var docNormal = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\bv1\.(k\w+)\.[A-Za-z0-9_-]{20,}`), "v1.$1.<mac>"},
	{regexp.MustCompile(`\bsha256:[0-9a-f]{24}\b`), "sha256:<spec>"},
	{regexp.MustCompile(`(local processes in )\S+\)`), "${1}<dir>)"},
	// A call's duration is printed from 10ms on.
	{regexp.MustCompile(` in \d+(?:\.\d+)?(?:ms|s) ->`), " ->"},
	{regexp.MustCompile(`(Wall Clock(?: Seconds)?:\s+)[\d.]+`), "${1}<n>"},
	{regexp.MustCompile(`^(answered: \S+ \w+ by )\S+( \(reason: .*\))?$`), "${1}<user>$2"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
	{regexp.MustCompile(`"resourceVersion":"\d+"`), `"resourceVersion":"<n>"`},
	{regexp.MustCompile(`"by":"[^"]*"`), `"by":"<user>"`},
	{regexp.MustCompile(`\b(refund-sweep)-\d+\b`), "$1-<minute>"},
	// generateName's suffix: five of the letters and digits it draws from.
	{regexp.MustCompile(`\b([a-z0-9]+(?:-[a-z0-9]+)*)-[bcdfghjklmnpqrstvwxz2456789]{5}\b`), "$1-<xxxxx>"},
	// After generateName's suffix, which may end in digits and "ms"
	// (refund-investigator-487ms).
	{regexp.MustCompile(`\b\d+(?:\.\d+)?(?:ms|µs|ns)`), "<age>"},
	{regexp.MustCompile(`\b\d+[smhd](\d+[sm])?\b`), "<age>"},
	{regexp.MustCompile(`\s+`), " "},
}

func normalDoc(lines []string) []string {
	var out []string
	for _, l := range lines {
		for _, n := range docNormal {
			l = n.re.ReplaceAllString(l, n.with)
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	// A follower prints each phase it sees; how many it sees depends on
	// timing, so only the last phase shown is compared.
	last := -1
	for i, l := range out {
		if strings.HasPrefix(l, "phase: ") {
			last = i
		}
	}
	var kept []string
	for i, l := range out {
		if !strings.HasPrefix(l, "phase: ") || i == last {
			kept = append(kept, l)
		}
	}
	return kept
}

// sameOutput compares what a command printed with what the docs show,
// both normalized. A line "..." in the docs stands for any lines printed
// there (the docs abridge). Events are recorded by the operator after the status
// write, each on its own (client-go's recorder sends every event from a
// goroutine of its own), and come to a follower on a watch of their own:
// where they fall among the run's lines, and whether the last ones come
// before the follower ends, depends on timing. So event lines are compared
// apart from the rest: each printed must be one the docs show, in the
// docs' order; the rest must be equal.
func sameOutput(got, want []string) bool {
	split := func(lines []string) (rest, events []string) {
		for _, l := range lines {
			if strings.HasPrefix(l, "event: ") {
				events = append(events, l)
			} else {
				rest = append(rest, l)
			}
		}
		return rest, events
	}
	gotRest, gotEvents := split(got)
	wantRest, wantEvents := split(want)
	if !abridged(gotRest, wantRest) {
		return false
	}
	i := 0
	for _, e := range gotEvents {
		for i < len(wantEvents) && wantEvents[i] != e {
			i++
		}
		if i == len(wantEvents) {
			return false
		}
		i++
	}
	return true
}

// The commands the docs show, run as a person would type them (kubectl and
// the kubectl-agentrun plugin on PATH) against the local control plane of
// `make dev`, print what the docs show under them, up to what varies
// (docNormal). A read (kubectl get) is repeated until it prints what is
// shown, for up to two minutes: it shows a state the run reaches.
func TestDocs_commandsPrintWhatTheDocsShow(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		if kubectl, err = exec.LookPath("kubectl"); err != nil {
			t.Fatal("the docs' commands need kubectl: put it on PATH or set KUBECTL (make e2e builds one into the envtest cache)")
		}
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-agentrun"), "./cmd/kubectl-agentrun")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	if err := os.Symlink(kubectl, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}

	env, c := startEnv(t)
	ctx := context.Background()
	shell := func(cmd string) ([]string, error) {
		sh := exec.CommandContext(ctx, "sh", "-c", cmd)
		sh.Dir = root
		sh.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := sh.CombinedOutput()
		var lines []string
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		return lines, err
	}

	blocks := docBlocks(t, root)
	for _, sc := range docScenarios {
		name := sc.name
		dir := t.TempDir()
		for _, f := range sc.samples {
			if err := os.Symlink(filepath.Join(root, "config", "samples", f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Apply(ctx, c, dir, "default"); err != nil {
			t.Fatalf("scenario %s: %v", name, err)
		}
		if setup := docSetup[name]; setup != nil {
			setup(ctx, t, c)
		}
		for _, b := range blocks {
			if b.Mark != name {
				continue
			}
			for _, dc := range b.Commands() {
				want := normalDoc(dc.Want)
				read := strings.HasPrefix(dc.Cmd, "kubectl get ")
				fails := len(dc.Want) > 0 && strings.HasPrefix(dc.Want[0], "error: ")
				if read {
					// A read shows a state the run reaches: asked again until
					// it prints what the docs show.
					var got []string
					NewWithT(t).Eventually(func() bool {
						got, _ = shell(dc.Cmd)
						return sameOutput(normalDoc(got), want)
					}, 2*time.Minute, time.Second).Should(BeTrue(), func() string {
						return fmt.Sprintf("%s:%d: $ %s printed\n\t%s\nwhere the docs show\n\t%s",
							b.File, b.Line, dc.Cmd, strings.Join(got, "\n\t"), strings.Join(dc.Want, "\n\t"))
					})
					continue
				}
				got, err := shell(dc.Cmd)
				switch {
				case err != nil && !fails:
					t.Errorf("%s:%d: $ %s: %v\n%s", b.File, b.Line, dc.Cmd, err, strings.Join(got, "\n"))
				case err == nil && fails:
					t.Errorf("%s:%d: $ %s succeeded; the docs show it refused", b.File, b.Line, dc.Cmd)
				case !sameOutput(normalDoc(got), want):
					t.Errorf("%s:%d: $ %s printed\n\t%s\nwhere the docs show\n\t%s", b.File, b.Line, dc.Cmd,
						strings.Join(got, "\n\t"), strings.Join(dc.Want, "\n\t"))
				}
			}
		}
	}
}

// abridged reports whether got is want with each "..." of want standing
// for any lines, none included.
func abridged(got, want []string) bool {
	switch {
	case len(want) == 0:
		return len(got) == 0
	case want[0] == "...":
		for i := range len(got) + 1 {
			if abridged(got[i:], want[1:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && got[0] == want[0] && abridged(got[1:], want[1:])
}

func TestSameOutput_eventsMayBeMissingNeverWrongOrOutOfOrder(t *testing.T) {
	want := []string{"created", "event: A", "event: B", "outcome: Completed"}
	for _, c := range []struct {
		got  []string
		same bool
	}{
		{[]string{"created", "event: A", "event: B", "outcome: Completed"}, true},
		{[]string{"created", "event: B", "outcome: Completed"}, true},
		{[]string{"created", "outcome: Completed", "event: A"}, true},
		{[]string{"created", "event: B", "event: A", "outcome: Completed"}, false},
		{[]string{"created", "event: C", "outcome: Completed"}, false},
		{[]string{"created", "event: A", "event: B", "outcome: Failed"}, false},
		{[]string{"created", "event: A", "event: B"}, false},
	} {
		if got := sameOutput(c.got, want); got != c.same {
			t.Errorf("sameOutput(%q) = %v, want %v", c.got, got, c.same)
		}
	}
	if got := normalDoc([]string{"phase: Running", "x  1s   2m", "phase: Succeeded"}); !slices.Equal(got, []string{"x <age> <age>", "phase: Succeeded"}) {
		t.Errorf("normalDoc = %q", got)
	}
	short := []string{"Name: r", "...", "Status:", "Phase: Succeeded", "..."}
	for _, c := range []struct {
		got  []string
		same bool
	}{
		{[]string{"Name: r", "Status:", "Phase: Succeeded"}, true},
		{[]string{"Name: r", "Spec:", "Goal: g", "Status:", "Phase: Succeeded", "Events:", "x"}, true},
		{[]string{"Name: r", "Spec:", "Status:", "Phase: Failed", "Events:"}, false},
		{[]string{"Spec:", "Name: r", "Status:", "Phase: Succeeded"}, false},
		{[]string{"Name: r", "Phase: Succeeded", "Status:"}, false},
	} {
		if got := sameOutput(c.got, short); got != c.same {
			t.Errorf("sameOutput(%q) with \"...\" = %v, want %v", c.got, got, c.same)
		}
	}
	if got := normalDoc([]string{"x v1.k1.x6xjPVgGPeVKGx1ZEuZ64IvnCQZ2hTujHMEIG02X_gA", "answered: t1-c1 deny by jane", "  Wall Clock Seconds:  2",
		"(sha256:e77527a19f4650c9f80f75d3, now sha256:1351eef55c65ef4d78e10ab2a1b9abca7bf3ba7e25a4aa2f00ed7879d164386a)",
		"t1-c1 x: ok in 16ms -> {}", "t1-c1 x: ok -> {}"}); !slices.Equal(got, []string{"x v1.k1.<mac>", "answered: t1-c1 deny by <user>", "Wall Clock Seconds: <n>",
		"(sha256:<spec>, now sha256:1351eef55c65ef4d78e10ab2a1b9abca7bf3ba7e25a4aa2f00ed7879d164386a)",
		"t1-c1 x: ok -> {}", "t1-c1 x: ok -> {}"}) {
		t.Errorf("normalDoc = %q", got)
	}
	// A generated suffix may end in digits and "ms"; it is a name, not a
	// duration.
	if got := normalDoc([]string{`answered: t1-c1 deny by jane (reason: "no")`}); !slices.Equal(got, []string{`answered: t1-c1 deny by <user> (reason: "no")`}) {
		t.Errorf("normalDoc = %q", got)
	}
	if got := normalDoc([]string{"refund-investigator-487ms 12ms", "refund-investigator-x7k2p"}); !slices.Equal(got, []string{"refund-investigator-<xxxxx> <age>", "refund-investigator-<xxxxx>"}) {
		t.Errorf("normalDoc = %q", got)
	}
}

// A control plane that has just started refuses a CRD's objects as
// unavailable (503) until its admission policies know the kind: Apply
// creates them again rather than fail `make demo` and the tests.
func TestApply_createsAgainWhileTheServerIsUnavailable(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "config", "samples", "01-double-charge.yaml"), filepath.Join(dir, "01.yaml")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	c := fake.NewClientBuilder().WithScheme(kubescheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if calls++; calls <= 2 {
				return apierrors.NewServiceUnavailable("Resource kind agents.agentrun.dev/v1alpha1, Kind=AgentRun not found. There can be a delay")
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	samples, err := Apply(context.Background(), c, dir, "default")
	if err != nil || len(samples) != 1 {
		t.Fatalf("Apply = %v, %v; want the sample created once the server answers", samples, err)
	}
	if calls != 3 {
		t.Errorf("%d creates, want 3 (two refused as unavailable, then created)", calls)
	}
}
