package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentrun/agentrun/internal/tools/job/entrypoint"
)

func TestRun_usageOnBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"--"}, {"install"}, {"run", "x"}, {"--timeout=soon", "--", "true"}, {"--timeout=1s"}} {
		if code := run(args); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}

func TestRun_installCopiesTheBinary(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "bin", "agentrun-entrypoint")
	if code := run([]string{"install", dst}); code != 0 {
		t.Fatalf("install exited %d", code)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed file: %v, %v; want an executable", fi, err)
	}
}

func TestRun_runsTheCommandWithATimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination-log")
	t.Setenv("AGENTRUN_TERMINATION_PATH", path)
	trueCmd, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) on this machine")
	}
	if code := run([]string{"--timeout=30s", "--", trueCmd}); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	msg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := entrypoint.ParseSummary(string(msg)); err != nil || s.Exit != 0 || s.TimedOut {
		t.Errorf("summary %+v, %v; want exit 0 in time", s, err)
	}
}
