package dockerfile_test

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/mod/modfile"

	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/test/e2e/dockerfile"
)

const root = "../../.."

func read(t *testing.T) *dockerfile.File {
	t.Helper()
	f, err := dockerfile.Read(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The e2e image (hack/e2e/operator-image) and the Job executor depend on
// this layout.
func TestDockerfile_imageLayout(t *testing.T) {
	f := read(t)
	layout, err := f.Layout()
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]string{}
	for _, b := range f.Builder.Builds {
		built[b.Output] = b.Package
	}
	got := map[string]string{}
	for _, in := range layout {
		pkg, ok := built[in.Src]
		if !ok {
			t.Errorf("the final stage copies %s, which no go build line writes", in.Src)
		}
		got[in.Dst] = pkg
	}
	want := map[string]string{
		"/manager":                "./cmd/manager",
		job.DefaultEntrypointPath: "./cmd/agentrun-entrypoint",
		"/kubectl-agentrun":       "./cmd/kubectl-agentrun",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("image files and the packages they are built from (-want +got):\n%s", d)
	}
	uid := strconv.FormatInt(job.DefaultRunAsUser, 10)
	if want := uid + ":" + uid; f.Final.User != want {
		t.Errorf("USER = %q, want %q (the uid tool Jobs and the chart run as)", f.Final.User, want)
	}
	if d := cmp.Diff([]string{"/manager"}, f.Final.Entrypoint); d != "" {
		t.Errorf("ENTRYPOINT (-want +got):\n%s", d)
	}
	if !strings.HasPrefix(f.Final.Base, "gcr.io/distroless/static") {
		t.Errorf("final base image %s: the binaries are static (CGO_ENABLED=0); want distroless/static", f.Final.Base)
	}
	if f.Builder.Env["CGO_ENABLED"] != "0" {
		t.Errorf("the builder stage's CGO_ENABLED = %q, want 0: the binaries run on distroless/static and in tool images", f.Builder.Env["CGO_ENABLED"])
	}
	// golang:X.Y follows the go directive of go.mod.
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.ParseLax("go.mod", b, nil)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(mf.Go.Version, ".", 3)
	if want := "golang:" + strings.Join(parts[:min(2, len(parts))], "."); f.Builder.Base != want {
		t.Errorf("builder image %s, want %s (go.mod says go %s)", f.Builder.Base, want, mf.Go.Version)
	}
}

// Every source the builder stage copies must be let through by
// .dockerignore, which ignores everything else.
func TestDockerignore_letsThroughWhatTheBuilderCopies(t *testing.T) {
	f := read(t)
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	for l := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "!"); ok {
			allowed[strings.TrimSuffix(p, "/")] = true
		}
	}
	for _, c := range f.Builder.Copies {
		for _, src := range c.Sources {
			if c.From == "" && !allowed[strings.TrimSuffix(path.Clean(src), "/")] {
				t.Errorf("COPY %s: .dockerignore does not let it through (add !%s)", src, src)
			}
		}
	}
}

func TestParse(t *testing.T) {
	const in = `# comment
ARG BASE=x
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
ENV CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH}
WORKDIR /ws
COPY go.mod go.sum ./
RUN go mod download && \
    GOEXPERIMENT=x go build -trimpath -ldflags="-s -w" -o /out/a ./cmd/a
RUN go build -o=/out/b ./cmd/b
FROM scratch
COPY --from=builder /out/a /a
USER 1:2
ENTRYPOINT ["/a", "x"]
`
	f, err := dockerfile.Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	wantBuilds := []dockerfile.Build{
		{Env: []string{"GOEXPERIMENT=x"}, Flags: []string{"-trimpath", "-ldflags=-s -w"}, Output: "/out/a", Package: "./cmd/a"},
		{Output: "/out/b", Package: "./cmd/b"},
	}
	if d := cmp.Diff(wantBuilds, f.Builder.Builds); d != "" {
		t.Errorf("builds (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"TARGETOS=linux", "TARGETARCH=", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="}, f.Builder.Environ()); d != "" {
		t.Errorf("builder env (-want +got):\n%s", d)
	}
	if f.Builder.Workdir != "/ws" || f.Final.User != "1:2" || !slices.Equal(f.Final.Entrypoint, []string{"/a", "x"}) {
		t.Errorf("workdir %q, user %q, entrypoint %q", f.Builder.Workdir, f.Final.User, f.Final.Entrypoint)
	}
	layout, err := f.Layout()
	if err != nil || len(layout) != 1 || layout[0] != (dockerfile.Install{Src: "/out/a", Dst: "/a"}) {
		t.Errorf("layout %v, %v", layout, err)
	}

	for name, bad := range map[string]string{
		"unknown instruction": "FROM x AS builder\nHEALTHCHECK NONE\n",
		"no builder stage":    "FROM x\nUSER 1\n",
		"shell entrypoint":    "FROM x AS builder\nENTRYPOINT /manager\n",
		"two packages":        "FROM x AS builder\nRUN go build -o /o ./a ./b\n",
		"legacy ENV":          "FROM x AS builder\nENV A b\n",
	} {
		if _, err := dockerfile.Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: parsed without an error", name)
		}
	}
}
