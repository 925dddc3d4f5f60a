package testenv

import (
	"strings"

	"k8s.io/client-go/tools/events"
)

// Drain returns the events rec has recorded and not yet returned, a line
// each, without waiting for more.
func Drain(rec *events.FakeRecorder) string {
	var b strings.Builder
	for {
		select {
		case e := <-rec.Events:
			b.WriteString(e + "\n")
		default:
			return b.String()
		}
	}
}
