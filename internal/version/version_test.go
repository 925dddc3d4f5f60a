package version

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuild_readsTheLinkedVersionAndTheCommit(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "1a2b3c4d5e6f7a8b9c0d"}, {Key: "vcs.time", Value: "2026-12-03T18:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	read := func() (*debug.BuildInfo, bool) { return bi, true }

	got := fromBuild("v0.2.0", read)
	if got.Version != "v0.2.0" || got.Commit != "1a2b3c4d5e6f7a8b9c0d" || got.CommitTime != "2026-12-03T18:00:00Z" || !got.Modified || got.GoVersion != "go1.26.8" {
		t.Fatalf("Info = %+v", got)
	}
	if s := got.String(); !strings.HasPrefix(s, "v0.2.0 (commit 1a2b3c4d5e6f, 2026-12-03T18:00:00Z, modified) go1.26.8 ") {
		t.Errorf("String = %q", s)
	}
	var back Info
	if err := json.Unmarshal([]byte(got.JSON()), &back); err != nil || back != got {
		t.Errorf("JSON %s reads back as %+v (%v)", got.JSON(), back, err)
	}
	// Not linked: the module's version (go install ...@v0.2.0 sets it).
	if v := fromBuild("", read).Version; v != "(devel)" {
		t.Errorf("unlinked version = %q, want the module's", v)
	}
	if v := fromBuild("", func() (*debug.BuildInfo, bool) { return nil, false }).Version; v != "unknown" {
		t.Errorf("no build information: version = %q", v)
	}
}

// The test binary itself carries Go's build information.
func TestGet_reportsThisBinary(t *testing.T) {
	got := Get()
	if got.GoVersion == "" || got.Platform == "" || got.Version == "" {
		t.Fatalf("Get() = %+v", got)
	}
}
