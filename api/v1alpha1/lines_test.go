package v1alpha1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxLine bounds the lines of the API's Go files. A marker cannot span
// lines, so a longer line is a CEL rule or message that says too much at
// once: move the rule down to the field it concerns, or split it.
const maxLine = 400

func TestTypes_noLineIsOverMaxLine(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(raw), "\n") {
			if len(l) > maxLine {
				t.Errorf("%s:%d is %d characters, more than %d: %.80s...", f, i+1, len(l), maxLine, l)
			}
		}
	}
}
