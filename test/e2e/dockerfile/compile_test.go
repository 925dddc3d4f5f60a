//go:build e2e

package dockerfile_test

import (
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// This test links every binary of the image with the builder stage's
// flags (CGO_ENABLED=0, -trimpath), which compile the whole tree a second
// time: in a fresh clone with the other core busy that took more than
// go test's default ten minutes and failed make test. It runs in make e2e
// (build tag e2e), after the operator's image was built with the same
// lines, so its compile comes from the build cache.
// The image is built where no test runs it (no container engine here, nor
// in CI), so every go build line is compiled here from a copy of exactly
// what the builder stage copies in: a package the Dockerfile forgets to
// copy, or a build line that names a command that moved, fails this test.
func TestDockerfile_everyGoBuildCompilesFromTheBuilderContext(t *testing.T) {
	f := read(t)
	if len(f.Builder.Builds) == 0 {
		t.Fatal("the builder stage has no go build line")
	}
	ctxDir := t.TempDir()
	work := filepath.Join(ctxDir, filepath.FromSlash(f.Builder.Workdir))
	for _, c := range f.Builder.Copies {
		if c.From != "" {
			continue
		}
		for _, src := range c.Sources {
			// A folder's contents go to DEST; a file goes into DEST when
			// DEST ends with a slash or there are several sources.
			dst := path.Join(f.Builder.Workdir, c.Dest)
			if !isDir(t, filepath.Join(root, src)) && (strings.HasSuffix(c.Dest, "/") || len(c.Sources) > 1) {
				dst = path.Join(dst, path.Base(src))
			}
			copyTree(t, filepath.Join(root, src), filepath.Join(ctxDir, filepath.FromSlash(dst)))
		}
	}
	outs, err := f.Compile(context.Background(), work, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range f.Builder.Builds {
		if st, err := os.Stat(outs[b.Output]); err != nil || st.Size() == 0 {
			t.Errorf("go build of %s wrote nothing to %s: %v", b.Package, b.Output, err)
		}
	}
}

func isDir(t *testing.T, p string) bool {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatalf("COPY source: %v", err)
	}
	return st.IsDir()
}

// copyTree copies src (a file or a folder) to dst, leaving out tests.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return os.MkdirAll(to, 0o755)
		}
		if strings.HasSuffix(p, "_test.go") || !d.Type().IsRegular() {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
