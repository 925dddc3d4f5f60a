// Command operator-image builds the operator's image for the e2e cluster
// without a container engine: it runs the go build lines of the
// Dockerfile's builder stage on this machine and lays the binaries out as
// the Dockerfile's final stage does (its COPY --from, USER and ENTRYPOINT),
// then writes an image tarball with hack/e2e/imagebuilder. Reading the
// Dockerfile, rather than repeating it, keeps the two from drifting.
//
//	go run ./hack/e2e/operator-image -o bin/e2e/operator.tar -t agentrun.local/operator:e2e
//	hack/e2e/load-image.sh bin/e2e/operator.tar
//
// The base image's own files (distroless/static: CA certificates, passwd)
// are not there, except the CA bundle, copied from this machine when it has
// one, so a real model provider's HTTPS works from the e2e image too.
// Run it from the repository root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agentrun/agentrun/test/e2e/dockerfile"
)

const caBundle = "/etc/ssl/certs/ca-certificates.crt"

func main() {
	var out, tag, file, binDir string
	flag.StringVar(&out, "o", "bin/e2e/operator.tar", "the image tarball to write")
	flag.StringVar(&tag, "t", "agentrun.local/operator:e2e", "the image's tag")
	flag.StringVar(&file, "f", "Dockerfile", "the Dockerfile to follow")
	flag.StringVar(&binDir, "bin", "bin/e2e/image", "where the binaries are built")
	flag.Parse()
	if err := run(out, tag, file, binDir); err != nil {
		fmt.Fprintln(os.Stderr, "operator-image:", err)
		os.Exit(1)
	}
}

func run(out, tag, file, binDir string) error {
	f, err := dockerfile.Read(file)
	if err != nil {
		return err
	}
	layout, err := f.Layout()
	if err != nil {
		return err
	}
	start := time.Now()
	ctx := context.Background()
	built, err := f.Compile(ctx, filepath.Dir(file), binDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "operator-image: built %d binaries in %s\n", len(built), time.Since(start).Round(100*time.Millisecond))

	args := []string{"-o", out, "-t", tag}
	for _, in := range layout {
		src, ok := built[in.Src]
		if !ok {
			return fmt.Errorf("the final stage copies %s, which no go build line of the builder stage writes", in.Src)
		}
		args = append(args, "-add", src+":"+in.Dst+":0755")
	}
	if _, err := os.Stat(caBundle); err == nil {
		args = append(args, "-add", caBundle+":"+caBundle+":0644")
	}
	if f.Final.User != "" {
		args = append(args, "-user", f.Final.User)
	}
	for _, e := range f.Final.Entrypoint {
		args = append(args, "-entrypoint", e)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "hack/e2e/imagebuilder.sh", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/e2e/imagebuilder.sh %v: %w", args, err)
	}
	return nil
}
