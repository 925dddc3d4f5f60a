package version

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The release workflow (.github/workflows/release.yaml) cannot run here: it
// needs GitHub's OIDC token and a registry. actionlint (make verify) checks
// its syntax; this checks that it publishes what the rest of the repository
// expects: the image the chart installs, for the platforms the operator is
// built for, signed, with provenance, from the files make release checked.
func TestReleaseWorkflow(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		Name string            `json:"name"`
		ID   string            `json:"id"`
		Uses string            `json:"uses"`
		Run  string            `json:"run"`
		With map[string]string `json:"with"`
	}
	type trigger struct {
		Push struct {
			Tags     []string `json:"tags"`
			Branches []string `json:"branches"`
		} `json:"push"`
	}
	var wf struct {
		On trigger `json:"on"`
		// YAML 1.1, which sigs.k8s.io/yaml reads, takes an unquoted on
		// for true.
		OnTrue trigger `json:"true"`
		Jobs   map[string]struct {
			Permissions map[string]string `json:"permissions"`
			Env         map[string]string `json:"env"`
			Steps       []step            `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("release.yaml: %v", err)
	}
	if len(wf.On.Push.Tags) == 0 {
		wf.On = wf.OnTrue
	}
	if len(wf.On.Push.Tags) == 0 || len(wf.On.Push.Branches) != 0 {
		t.Errorf("on.push: tags %v, branches %v: want tags only", wf.On.Push.Tags, wf.On.Push.Branches)
	}
	job, ok := wf.Jobs["release"]
	if !ok {
		t.Fatal("no job named release")
	}
	for perm, want := range map[string]string{"contents": "write", "packages": "write", "id-token": "write", "attestations": "write"} {
		if job.Permissions[perm] != want {
			t.Errorf("permissions.%s = %q, want %q", perm, job.Permissions[perm], want)
		}
	}

	find := func(pred func(step) bool, what string) step {
		t.Helper()
		for _, s := range job.Steps {
			if pred(s) {
				return s
			}
		}
		t.Errorf("no step %s", what)
		return step{}
	}
	find(func(s step) bool { return strings.Contains(s.Run, "make release VERSION=") }, "runs make release VERSION=...")

	// The image: the repository and tag the chart installs by default
	// (values image.repository, tag = the chart's appVersion, which
	// hack/release.sh sets to the version without its v), for every linux
	// platform hack/release.sh builds the operator for.
	values, err := os.ReadFile(filepath.Join(root, "charts", "agentrun", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(values, &chart); err != nil {
		t.Fatal(err)
	}
	if job.Env["IMAGE"] != chart.Image.Repository {
		t.Errorf("env.IMAGE = %q, the chart installs %q", job.Env["IMAGE"], chart.Image.Repository)
	}
	build := find(func(s step) bool { return strings.HasPrefix(s.Uses, "docker/build-push-action@") }, "builds the image with docker/build-push-action")
	if build.With["file"] != "Dockerfile" || build.With["push"] != "true" {
		t.Errorf("image build: file %q, push %q: want Dockerfile, true", build.With["file"], build.With["push"])
	}
	if want := "${{ env.IMAGE }}:${{ steps.version.outputs.plain }}"; build.With["tags"] != want {
		t.Errorf("image tags %q, want %q (the chart's appVersion)", build.With["tags"], want)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PLATFORMS="([^"]*)"$`).FindSubmatch(script)
	if m == nil {
		t.Fatal(`hack/release.sh sets no PLATFORMS="..."`)
	}
	var linux []string
	for _, p := range strings.Fields(string(m[1])) {
		if strings.HasPrefix(p, "linux/") {
			linux = append(linux, p)
		}
	}
	imagePlatforms := strings.Split(build.With["platforms"], ",")
	slices.Sort(linux)
	slices.Sort(imagePlatforms)
	if !slices.Equal(linux, imagePlatforms) {
		t.Errorf("image platforms %v, hack/release.sh's linux platforms %v: want the same", imagePlatforms, linux)
	}
	if !strings.Contains(string(script), `--app-version "${VERSION#v}"`) {
		t.Error("hack/release.sh does not package the chart with appVersion = the version without its v, the image tag pushed")
	}

	// Signed and attested.
	sign := find(func(s step) bool { return strings.Contains(s.Run, "cosign sign") }, "signs with cosign")
	for _, want := range []string{`cosign sign --yes "$IMAGE@$IMAGE_DIGEST"`, `cosign sign --yes "$CHARTS/agentrun@$CHART_DIGEST"`, "cosign sign-blob --yes --bundle dist/checksums.txt.sigstore.json dist/checksums.txt"} {
		if !strings.Contains(sign.Run, want) {
			t.Errorf("the signing step does not run %s", want)
		}
	}
	find(func(s step) bool {
		return strings.HasPrefix(s.Uses, "actions/attest-build-provenance@") && s.With["subject-checksums"] == "dist/checksums.txt"
	}, "attests the provenance of dist/checksums.txt's files")
	find(func(s step) bool {
		return strings.HasPrefix(s.Uses, "actions/attest-build-provenance@") && s.With["subject-name"] == "${{ env.IMAGE }}" && s.With["push-to-registry"] == "true"
	}, "attests the image's provenance")
	publish := find(func(s step) bool { return strings.Contains(s.Run, "gh release create") }, "publishes the GitHub release")
	if !strings.Contains(publish.Run, "dist/*") {
		t.Errorf("the GitHub release does not carry dist/*: %s", publish.Run)
	}
}
