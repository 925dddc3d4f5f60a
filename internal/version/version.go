// Package version reports what a binary was built from: the release
// version (set at link time, or the module's version when installed with
// go install), the commit and its time from Go's build information, and
// the Go version and platform.
package version

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release, set at link time:
//
//	go build -ldflags "-X github.com/agentrun/agentrun/internal/version.Version=v0.2.0"
//
// Empty, Get falls back to the main module's version ("(devel)" in a
// checkout).
var Version string

// Info is what Get reports.
type Info struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commitTime,omitempty"`
	// Modified is set when the working tree had changes the commit lacks.
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get reads the binary's build information.
func Get() Info {
	return fromBuild(Version, debug.ReadBuildInfo)
}

func fromBuild(linked string, read func() (*debug.BuildInfo, bool)) Info {
	info := Info{Version: linked, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := read()
	if !ok {
		if info.Version == "" {
			info.Version = "unknown"
		}
		return info
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "unknown"
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is one line for people: "v0.2.0 (commit 1a2b3c4d5e6f, 2026-12-03T18:00:00Z, modified) go1.26.8 linux/amd64".
func (i Info) String() string {
	s := i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (commit " + c
		if i.CommitTime != "" {
			s += ", " + i.CommitTime
		}
		if i.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s %s", s, i.GoVersion, i.Platform)
}

// JSON is the information as one JSON object.
func (i Info) JSON() string {
	b, _ := json.Marshal(i) // a struct of strings and a bool always marshals
	return string(b)
}
