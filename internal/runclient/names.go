package runclient

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// maxGeneratedBase is the longest generateName the API server keeps whole:
// it cuts longer ones to this length before adding 5 random characters.
const maxGeneratedBase = 58

// GenerateName is the generateName of a run made from base: "base-", with
// base cut so that the server does not cut the '-' off instead, and with
// no '.' or '-' left dangling before it.
func GenerateName(base string) string {
	if len(base) >= maxGeneratedBase {
		base = strings.TrimRight(base[:maxGeneratedBase-1], ".-")
	}
	return base + "-"
}

// NameLabel is the value of a label that names a run (rerun-of,
// continued-from): the name itself when it is a valid label value, else
// its first 63 characters without a trailing '.' or '-' (cut reports it).
func NameLabel(name string) (value string, cut bool) {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name, false
	}
	if len(name) > validation.LabelValueMaxLength {
		name = name[:validation.LabelValueMaxLength]
	}
	return strings.TrimRight(name, ".-"), true
}
