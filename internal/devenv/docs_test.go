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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/testenv"
)

// A block of commands shown in the docs: a fenced block in a shell
// language, or one whose lines start with "$ ". The line just above its
// fence says what becomes of it:
//
//	<!-- docs-test: NAME -->            run by the scenario NAME of TestDocs_commandsPrintWhatTheDocsShow
//	<!-- docs-test: not run: REASON --> not run, and why
type docBlock struct {
	file   string
	line   int
	mark   string
	prompt bool // the commands start with "$ " and their output follows each
	lines  []string
}

// docCommand is one command of a block and the output shown under it.
type docCommand struct {
	cmd  string
	want []string
}

var docMark = regexp.MustCompile(`^<!-- docs-test: (.+?) -->$`)

// docBlocks reads every command block of README.md and docs/*.md.
func docBlocks(t *testing.T, root string) []docBlock {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var blocks []docBlock
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		lines := strings.Split(string(raw), "\n")
		for i := 0; i < len(lines); i++ {
			lang, ok := strings.CutPrefix(lines[i], "```")
			if !ok {
				continue
			}
			b := docBlock{file: rel, line: i + 1}
			if i > 0 {
				if m := docMark.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
					b.mark = m[1]
				}
			}
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				b.lines = append(b.lines, lines[i])
				b.prompt = b.prompt || strings.HasPrefix(lines[i], "$ ")
			}
			switch strings.TrimSpace(lang) {
			case "sh", "bash", "shell", "console":
			default:
				if !b.prompt {
					continue
				}
			}
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// commands splits a "$ " block into its commands and what each printed.
func (b docBlock) commands() []docCommand {
	var cmds []docCommand
	for _, l := range b.lines {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			cmds = append(cmds, docCommand{cmd: c})
			continue
		}
		if len(cmds) > 0 && strings.TrimSpace(l) != "" {
			cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, l)
		}
	}
	return cmds
}

// docScenarios are what TestDocs_commandsPrintWhatTheDocsShow runs: the
// samples each applies before its blocks' commands run, in the docs'
// order.
var docScenarios = map[string][]string{
	"approvals": {"02-refund-approval.yaml"},
	"templates": {"12-template.yaml"},
	"schedules": {"13-schedule.yaml"},
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
		switch reason, notRun := strings.CutPrefix(b.mark, "not run: "); {
		case b.mark == "":
			t.Errorf("%s:%d: a command block without <!-- docs-test: SCENARIO --> or <!-- docs-test: not run: REASON --> above it", b.file, b.line)
		case notRun && len(strings.TrimSpace(reason)) < 10:
			t.Errorf("%s:%d: %q does not say why the block is not run", b.file, b.line, b.mark)
		case !notRun && docScenarios[b.mark] == nil:
			t.Errorf("%s:%d: no scenario %q in docScenarios", b.file, b.line, b.mark)
		case !notRun && !b.prompt:
			t.Errorf("%s:%d: a block run by scenario %s must show its commands as \"$ command\" with their output", b.file, b.line, b.mark)
		case !notRun:
			run[b.mark]++
		}
	}
	for name := range docScenarios {
		if run[name] == 0 {
			t.Errorf("scenario %s runs no block of the docs", name)
		}
	}
}

// What varies from one run of the docs' commands to the next: times, ages,
// generated name suffixes, resource versions, the user that answered.
var docNormal = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
	{regexp.MustCompile(`"resourceVersion":"\d+"`), `"resourceVersion":"<n>"`},
	{regexp.MustCompile(`"by":"[^"]*"`), `"by":"<user>"`},
	{regexp.MustCompile(`\b(refund-sweep)-\d+\b`), "$1-<minute>"},
	// generateName's suffix: five of the letters and digits it draws from.
	{regexp.MustCompile(`\b([a-z0-9]+(?:-[a-z0-9]+)*)-[bcdfghjklmnpqrstvwxz2456789]{5}\b`), "$1-<xxxxx>"},
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
// both normalized. Events are recorded by the operator after the status
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
	if !slices.Equal(gotRest, wantRest) {
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

	env, err := Start(filepath.Join(t.TempDir(), "kubeconfig"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	c, err := client.New(env.Config, client.Options{Scheme: kubescheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
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
	for _, name := range []string{"approvals", "templates", "schedules"} {
		dir := t.TempDir()
		for _, f := range docScenarios[name] {
			if err := os.Symlink(filepath.Join(root, "config", "samples", f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Apply(ctx, c, dir, "default"); err != nil {
			t.Fatalf("scenario %s: %v", name, err)
		}
		for _, b := range blocks {
			if b.mark != name {
				continue
			}
			for _, dc := range b.commands() {
				want := normalDoc(dc.want)
				read := strings.HasPrefix(dc.cmd, "kubectl get ")
				fails := len(dc.want) > 0 && strings.HasPrefix(dc.want[0], "error: ")
				if read {
					// A read shows a state the run reaches: asked again until
					// it prints what the docs show.
					var got []string
					NewWithT(t).Eventually(func() bool {
						got, _ = shell(dc.cmd)
						return sameOutput(normalDoc(got), want)
					}, 2*time.Minute, time.Second).Should(BeTrue(), func() string {
						return fmt.Sprintf("%s:%d: $ %s printed\n\t%s\nwhere the docs show\n\t%s",
							b.file, b.line, dc.cmd, strings.Join(got, "\n\t"), strings.Join(dc.want, "\n\t"))
					})
					continue
				}
				got, err := shell(dc.cmd)
				switch {
				case err != nil && !fails:
					t.Errorf("%s:%d: $ %s: %v\n%s", b.file, b.line, dc.cmd, err, strings.Join(got, "\n"))
				case err == nil && fails:
					t.Errorf("%s:%d: $ %s succeeded; the docs show it refused", b.file, b.line, dc.cmd)
				case !sameOutput(normalDoc(got), want):
					t.Errorf("%s:%d: $ %s printed\n\t%s\nwhere the docs show\n\t%s", b.file, b.line, dc.cmd,
						strings.Join(got, "\n\t"), strings.Join(dc.want, "\n\t"))
				}
			}
		}
	}
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
