package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DocBlock is a block of commands shown in README.md or docs/*.md: a
// fenced block in a shell language, or one whose lines start with "$ ".
// The line just above its fence says what becomes of it:
//
//	<!-- docs-test: NAME -->            run by the test that owns the scenario NAME
//	<!-- docs-test: not run: REASON --> not run, and why
type DocBlock struct {
	File   string // relative to the repository's root
	Line   int    // of the opening fence
	Mark   string // what the comment above says; empty without one
	Prompt bool   // the commands start with "$ " and their output follows each
	Lines  []string
}

// DocCommand is one command of a block and the output shown under it.
type DocCommand struct {
	Cmd  string
	Want []string
}

var docMark = regexp.MustCompile(`^<!-- docs-test: (.+?) -->$`)

// DocBlocks reads every command block of README.md and docs/*.md under
// root, in that order.
func DocBlocks(root string) ([]DocBlock, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var blocks []DocBlock
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		lines := strings.Split(string(raw), "\n")
		for i := 0; i < len(lines); i++ {
			lang, ok := strings.CutPrefix(lines[i], "```")
			if !ok {
				continue
			}
			b := DocBlock{File: rel, Line: i + 1}
			if i > 0 {
				if m := docMark.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
					b.Mark = m[1]
				}
			}
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				b.Lines = append(b.Lines, lines[i])
				b.Prompt = b.Prompt || strings.HasPrefix(lines[i], "$ ")
			}
			switch strings.TrimSpace(lang) {
			case "sh", "bash", "shell", "console":
			default:
				if !b.Prompt {
					continue
				}
			}
			blocks = append(blocks, b)
		}
	}
	return blocks, nil
}

// Commands splits a "$ " block into its commands and what each printed.
func (b DocBlock) Commands() []DocCommand {
	var cmds []DocCommand
	for _, l := range b.Lines {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			cmds = append(cmds, DocCommand{Cmd: c})
			continue
		}
		if len(cmds) > 0 && strings.TrimSpace(l) != "" {
			cmds[len(cmds)-1].Want = append(cmds[len(cmds)-1].Want, l)
		}
	}
	return cmds
}
