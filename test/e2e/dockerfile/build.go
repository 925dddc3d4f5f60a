package dockerfile

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Compile runs every go build of the builder stage in dir (a module root:
// the repository, or a copy of the builder's context) and writes each
// output into outDir under its base name. It returns the host path of each
// output, by its path in the builder stage (/out/manager). The stage's
// environment applies, except that an empty GOARCH or GOOS means the
// host's, as in a build without --build-arg.
func (f *File) Compile(ctx context.Context, dir, outDir string) (map[string]string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	outputs := map[string]string{}
	for _, b := range f.Builder.Builds {
		host := filepath.Join(outDir, path.Base(b.Output))
		args := append(append([]string{"build"}, b.Flags...), "-o", host, b.Package)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), f.Builder.Environ()...)
		cmd.Env = append(cmd.Env, b.Env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s (env %s): %v\n%s", strings.Join(cmd.Args, " "),
				strings.Join(append(f.Builder.Environ(), b.Env...), " "), err, out)
		}
		outputs[b.Output] = host
	}
	return outputs, nil
}

// Install is one file of the final image: Src is the builder stage's path,
// Dst the image's.
type Install struct {
	Src, Dst string
}

// Layout is the files the final stage copies from the builder stage.
func (f *File) Layout() ([]Install, error) {
	var out []Install
	for _, c := range f.Final.Copies {
		if c.From != f.Builder.Name {
			return nil, fmt.Errorf("the final stage copies %v from %q, not from the builder stage", c.Sources, c.From)
		}
		if len(c.Sources) != 1 || strings.HasSuffix(c.Dest, "/") {
			return nil, fmt.Errorf("COPY --from=%s %v %s: copy one file to a file path", c.From, c.Sources, c.Dest)
		}
		out = append(out, Install{Src: c.Sources[0], Dst: c.Dest})
	}
	return out, nil
}
