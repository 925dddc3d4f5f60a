// Command imagebuilder builds a single-layer OCI image from local files (static
// binaries, mostly) and writes it as a docker-style image tarball that
// `ctr -n k8s.io images import` accepts. No registry and no container engine are
// involved: the layer is a tar file appended to an empty image.
//
// Example:
//
//	go run . -o /tmp/tool.tar -t agentrun.local/testtool:e2e \
//	    -add /tmp/testtool:/testtool:0755 -mkdir /tmp:1777 \
//	    -entrypoint /testtool -user 65532:65532
//
// Every file in the layer is owned by root and dated at the Unix epoch, and the
// image's creation time is the epoch too, so the same inputs give the same digest.
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

type entry struct {
	src  string // empty for a directory
	dst  string
	mode int64
}

func main() {
	var (
		out, tag, user, workdir, arch string
		adds, dirs, entrypoint, cmd   multi
		envs, labels                  multi
	)
	flag.StringVar(&out, "o", "", "output image tarball (required)")
	flag.StringVar(&tag, "t", "", "image reference to tag it with, e.g. example.local/tool:v1 (required)")
	flag.Var(&adds, "add", "SRC:DST[:MODE] a local file put at DST in the image (mode defaults to 0755); repeatable")
	flag.Var(&dirs, "mkdir", "DST[:MODE] an empty directory (mode defaults to 0755); repeatable")
	flag.Var(&entrypoint, "entrypoint", "one element of the entrypoint; repeat for more")
	flag.Var(&cmd, "cmd", "one element of the default arguments; repeat for more")
	flag.Var(&envs, "env", "KEY=VALUE in the image config; repeatable")
	flag.Var(&labels, "label", "KEY=VALUE label; repeatable")
	flag.StringVar(&user, "user", "65532:65532", "user the image runs as (numeric, so runAsNonRoot can check it)")
	flag.StringVar(&workdir, "workdir", "/", "working directory")
	flag.StringVar(&arch, "arch", "amd64", "architecture recorded in the image config")
	flag.Parse()
	if out == "" || tag == "" || len(adds) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(out, tag, user, workdir, arch, adds, dirs, entrypoint, cmd, envs, labels); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuilder:", err)
		os.Exit(1)
	}
}

func build(out, tag, user, workdir, arch string, adds, dirs, entrypoint, cmd, envs, labels []string) error {
	ref, err := name.NewTag(tag, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", tag, err)
	}
	var entries []entry
	for _, a := range adds {
		parts := strings.Split(a, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return fmt.Errorf("-add %q: want SRC:DST[:MODE]", a)
		}
		mode, err := parseMode(parts, 0o755)
		if err != nil {
			return fmt.Errorf("-add %q: %w", a, err)
		}
		entries = append(entries, entry{src: parts[0], dst: parts[1], mode: mode})
	}
	for _, d := range dirs {
		parts := strings.Split(d, ":")
		mode, err := parseMode(append([]string{""}, parts...), 0o755)
		if err != nil || len(parts) > 2 {
			return fmt.Errorf("-mkdir %q: want DST[:MODE]", d)
		}
		entries = append(entries, entry{dst: parts[0], mode: mode})
	}

	layerFile, err := os.CreateTemp("", "imagebuilder-layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(layerFile.Name())
	if err := writeLayer(layerFile, entries); err != nil {
		layerFile.Close()
		return err
	}
	if err := layerFile.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromFile(layerFile.Name())
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = cmd
	cf.Config.User = user
	cf.Config.WorkingDir = workdir
	cf.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, envs...)
	if len(labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("-label %q: want KEY=VALUE", l)
			}
			cf.Config.Labels[k] = v
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", out, ref.Name(), digest)
	return nil
}

func parseMode(parts []string, def int64) (int64, error) {
	if len(parts) < 3 || parts[2] == "" {
		return def, nil
	}
	return strconv.ParseInt(parts[2], 8, 64)
}

// writeLayer writes the entries, and every parent directory they need, as a tar.
func writeLayer(w io.Writer, entries []entry) error {
	epoch := time.Unix(0, 0)
	dirs := map[string]int64{}
	files := map[string]entry{}
	for _, e := range entries {
		dst := path.Clean("/" + e.dst)
		for p := path.Dir(dst); p != "/"; p = path.Dir(p) {
			if _, ok := dirs[p]; !ok {
				dirs[p] = 0o755
			}
		}
		if e.src == "" {
			dirs[dst] = e.mode
		} else {
			e.dst = dst
			files[dst] = e
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d)
	}
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names) // parents sort before their children
	tw := tar.NewWriter(w)
	for _, n := range names {
		rel := strings.TrimPrefix(n, "/")
		if mode, ok := dirs[n]; ok {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		e := files[n]
		f, err := os.Open(filepath.Clean(e.src))
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		if !st.Mode().IsRegular() {
			f.Close()
			return fmt.Errorf("%s is not a regular file", e.src)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: e.mode, Size: st.Size(), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
