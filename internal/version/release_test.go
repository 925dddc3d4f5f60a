package version

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The release (hack/release.sh) and the krew manifest it writes
// (plugins/agentrun.yaml.in) name the platforms twice: a platform added to
// one only would ship an archive krew never offers, or a manifest entry
// whose placeholders nothing fills. `make release` itself checks the
// rendered manifest with krew's validator; this is the cheap check that
// runs with the package's tests, without eight cross builds.
func TestReleasePlatformsAreTheKrewManifests(t *testing.T) {
	root := filepath.Join("..", "..")
	script, err := os.ReadFile(filepath.Join(root, "hack", "release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	shellVar := func(name string) []string {
		m := regexp.MustCompile(`(?m)^` + name + `="([^"]*)"$`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("hack/release.sh sets no %s=\"...\"", name)
		}
		return strings.Fields(string(m[1]))
	}
	platforms := shellVar("PLATFORMS")
	if !slices.Contains(shellVar("EVERYWHERE"), "kubectl-agentrun") {
		t.Fatal("hack/release.sh does not build kubectl-agentrun for every platform (EVERYWHERE)")
	}

	raw, err := os.ReadFile(filepath.Join(root, "plugins", "agentrun.yaml.in"))
	if err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &plugin); err != nil {
		t.Fatalf("plugins/agentrun.yaml.in: %v", err)
	}
	if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" || plugin.Metadata.Name != "agentrun" {
		t.Errorf("apiVersion, kind, name = %s, %s, %s", plugin.APIVersion, plugin.Kind, plugin.Metadata.Name)
	}
	if plugin.Spec.Version != "@VERSION@" {
		t.Errorf("spec.version = %q: want @VERSION@, which the release fills", plugin.Spec.Version)
	}

	var listed []string
	for i, p := range plugin.Spec.Platforms {
		osName, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		if len(p.Selector.MatchLabels) != 2 || osName == "" || arch == "" {
			t.Errorf("platforms[%d]: selector %v: want exactly os and arch", i, p.Selector.MatchLabels)
			continue
		}
		listed = append(listed, osName+"/"+arch)
		// The names hack/release.sh gives the plugin's archives and the
		// placeholders it fills.
		if want := fmt.Sprintf("@RELEASE_URL@/kubectl-agentrun_@VERSION@_%s_%s.tar.gz", osName, arch); p.URI != want {
			t.Errorf("platforms[%d].uri = %q, want %q", i, p.URI, want)
		}
		if want := fmt.Sprintf("@SHA256_%s_%s@", osName, arch); p.SHA256 != want {
			t.Errorf("platforms[%d].sha256 = %q, want %q", i, p.SHA256, want)
		}
		// Windows runs only files named .exe; hack/release.sh names them so.
		wantBin := "kubectl-agentrun"
		if osName == "windows" {
			wantBin += ".exe"
		}
		if p.Bin != wantBin {
			t.Errorf("platforms[%d].bin = %q, want %s", i, p.Bin, wantBin)
		}
	}
	slices.Sort(listed)
	sorted := slices.Clone(platforms)
	slices.Sort(sorted)
	if !slices.Equal(listed, sorted) {
		t.Errorf("krew manifest platforms %v, hack/release.sh PLATFORMS %v: want the same, once each", listed, sorted)
	}
}
