// Package dockerfile reads the parts of the repository's Dockerfile that the
// e2e image and the tests depend on: the builder stage's COPY and go build
// lines, and the final stage's layout (COPY --from, USER, ENTRYPOINT).
//
// It understands the subset of the Dockerfile syntax that file uses: FROM
// ... AS NAME, ARG and ENV (KEY=VALUE forms), WORKDIR, COPY, RUN (one or
// more commands joined with &&), USER and ENTRYPOINT in exec form, line
// continuations and comments. Anything else in the builder stage's RUN
// lines is ignored unless it is a go build. An instruction it does not
// know is an error, so a change to the Dockerfile that this package would
// misread fails the tests instead of drifting.
package dockerfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// File is what the Dockerfile says about the image.
type File struct {
	// Builder is the stage named "builder".
	Builder Stage
	// Final is the last stage: the image.
	Final Stage
}

// Stage is one FROM ... of the Dockerfile.
type Stage struct {
	Name, Base string
	// Env is the environment of RUN lines: ARG defaults and ENV values,
	// variables expanded.
	Env map[string]string
	// EnvOrder lists Env's keys in the order they were set.
	EnvOrder []string
	// Workdir is the last WORKDIR ("/" when none).
	Workdir string
	// Copies are the COPY instructions, in order.
	Copies []Copy
	// Builds are the go build commands of RUN lines, in order.
	Builds []Build
	// User and Entrypoint are the last USER and ENTRYPOINT.
	User       string
	Entrypoint []string
}

// Copy is one COPY instruction. From is empty for a copy from the build
// context.
type Copy struct {
	From    string
	Sources []string
	Dest    string
}

// Build is one go build command.
type Build struct {
	// Env holds the KEY=VALUE assignments before "go" on its line.
	Env []string
	// Flags are the arguments between "build" and the package, -o and its
	// value left out.
	Flags []string
	// Output is -o's value, Package the package built.
	Output, Package string
}

// Read parses the Dockerfile at file.
func Read(file string) (*File, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses a Dockerfile.
func Parse(r io.Reader) (*File, error) {
	lines, err := logicalLines(r)
	if err != nil {
		return nil, err
	}
	var stages []*Stage
	var cur *Stage
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l.text, " ")
		instr = strings.ToUpper(instr)
		rest = strings.TrimSpace(rest)
		fail := func(format string, a ...any) error {
			return fmt.Errorf("Dockerfile line %d (%s): %s", l.no, instr, fmt.Sprintf(format, a...))
		}
		if instr == "FROM" {
			words := strings.Fields(rest)
			// --platform=$BUILDPLATFORM lets buildx compile on the
			// builder's own platform for every target; here the build
			// runs on this machine anyway.
			if len(words) > 0 && strings.HasPrefix(words[0], "--platform=") {
				words = words[1:]
			}
			st := &Stage{Env: map[string]string{}, Workdir: "/"}
			switch {
			case len(words) == 1:
			case len(words) == 3 && strings.EqualFold(words[1], "AS"):
				st.Name = words[2]
			default:
				return nil, fail("want FROM IMAGE [AS NAME]")
			}
			st.Base = words[0]
			stages = append(stages, st)
			cur = st
			continue
		}
		if cur == nil {
			if instr == "ARG" {
				continue // an ARG before the first FROM only feeds FROM lines
			}
			return nil, fail("before the first FROM")
		}
		switch instr {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			cur.set(k, cur.expand(v))
		case "ENV":
			words, err := split(rest)
			if err != nil {
				return nil, fail("%v", err)
			}
			for _, w := range words {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					return nil, fail("only the ENV KEY=VALUE form is understood")
				}
				cur.set(k, cur.expand(v))
			}
		case "WORKDIR":
			cur.Workdir = path.Join(cur.Workdir, cur.expand(rest))
		case "COPY":
			words, err := split(rest)
			if err != nil {
				return nil, fail("%v", err)
			}
			var c Copy
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				if from, ok := strings.CutPrefix(words[0], "--from="); ok {
					c.From = from
				} else {
					return nil, fail("unknown flag %s", words[0])
				}
				words = words[1:]
			}
			if len(words) < 2 {
				return nil, fail("want COPY SRC... DEST")
			}
			c.Sources, c.Dest = words[:len(words)-1], words[len(words)-1]
			cur.Copies = append(cur.Copies, c)
		case "RUN":
			for cmd := range strings.SplitSeq(rest, "&&") {
				words, err := split(cur.expand(cmd))
				if err != nil {
					return nil, fail("%v", err)
				}
				b, ok, err := parseBuild(words)
				if err != nil {
					return nil, fail("%v", err)
				}
				if ok {
					cur.Builds = append(cur.Builds, b)
				}
			}
		case "USER":
			cur.User = cur.expand(rest)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &cur.Entrypoint); err != nil {
				return nil, fail("want the exec form, a JSON array: %v", err)
			}
		case "LABEL", "EXPOSE", "CMD":
			// Not part of what the tests or the e2e image use.
		default:
			return nil, fail("not understood by test/e2e/dockerfile")
		}
	}
	f := &File{}
	for _, s := range stages {
		if s.Name == "builder" {
			f.Builder = *s
		}
	}
	if len(stages) == 0 || f.Builder.Name == "" {
		return nil, fmt.Errorf("the Dockerfile has no stage named builder")
	}
	f.Final = *stages[len(stages)-1]
	return f, nil
}

func (s *Stage) set(k, v string) {
	if _, ok := s.Env[k]; !ok {
		s.EnvOrder = append(s.EnvOrder, k)
	}
	s.Env[k] = v
}

// expand replaces $VAR and ${VAR} with the stage's values (empty when
// unset, as a build without --build-arg has them).
func (s *Stage) expand(v string) string {
	return os.Expand(v, func(k string) string { return s.Env[k] })
}

// Environ is the stage's environment as KEY=VALUE, in order.
func (s *Stage) Environ() []string {
	out := make([]string, 0, len(s.EnvOrder))
	for _, k := range s.EnvOrder {
		out = append(out, k+"="+s.Env[k])
	}
	return out
}

// parseBuild reads "[K=V...] go build [FLAGS] -o OUT PKG".
func parseBuild(words []string) (Build, bool, error) {
	var b Build
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		b.Env, words = append(b.Env, words[0]), words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return b, false, nil
	}
	args := words[2:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o":
			if i+1 >= len(args) {
				return b, false, fmt.Errorf("go build -o without a value")
			}
			b.Output = args[i+1]
			i++
		case strings.HasPrefix(a, "-o="):
			b.Output = strings.TrimPrefix(a, "-o=")
		case strings.HasPrefix(a, "-"):
			b.Flags = append(b.Flags, a)
		case b.Package == "":
			b.Package = a
		default:
			return b, false, fmt.Errorf("go build of more than one package (%s, %s)", b.Package, a)
		}
	}
	if b.Output == "" || b.Package == "" {
		return b, false, fmt.Errorf("go build needs -o OUT and one package")
	}
	return b, true, nil
}

type line struct {
	no   int
	text string
}

// logicalLines joins continued lines and drops comments and blank lines.
func logicalLines(r io.Reader) ([]line, error) {
	var out []line
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(r)
	for no := 1; sc.Scan(); no++ {
		t := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(t, "#") || (t == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = no
		}
		if c, ok := strings.CutSuffix(t, `\`); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(t)
		out = append(out, line{no: start, text: strings.TrimSpace(cur.String())})
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, line{no: start, text: strings.TrimSpace(cur.String())})
	}
	return out, sc.Err()
}

// split splits a shell command into words: whitespace separates, single
// and double quotes group (no escapes inside single quotes).
func split(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}
