package loop

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"

	"github.com/agentrun/agentrun/internal/clip"
)

// ObsStatus says how a tool call ended, as recorded on its tool message.
type ObsStatus string

// Observation statuses.
const (
	// ObsOK: the call ran and returned a result.
	ObsOK ObsStatus = "ok"
	// ObsFailed: the call ran (or its outcome is unknown) and failed.
	ObsFailed ObsStatus = "failed"
	// ObsDenied: the policy denied the call; it did not run.
	ObsDenied ObsStatus = "denied"
	// ObsBlocked: a guardrail blocked the call; it did not run.
	ObsBlocked ObsStatus = "blocked"
	// ObsDeclined: a person declined the call; it did not run.
	ObsDeclined ObsStatus = "declined"
	// ObsInvalid: the call could not be vetted (unknown tool, arguments
	// refused); it did not run.
	ObsInvalid ObsStatus = "invalid"
)

// IsError reports whether the call did not produce a normal result
// (failed, denied, blocked, declined, invalid).
func (s ObsStatus) IsError() bool { return s != "" && s != ObsOK }

// RenderResult turns a tool's raw result into what the model reads (its
// observation): a bounded, valid UTF-8 text. A failure becomes a short
// sentence that names the condition, the choices, and whether an
// unchanged retry can help; an HTML page becomes its text (or, for a
// sign-in page, an authentication failure); a long result is cut at
// maxResultBytes and the cut is marked.
func RenderResult(tool string, maxResultBytes int, r Result) (text string, status ObsStatus) {
	if maxResultBytes <= 0 {
		maxResultBytes = DefaultMaxResultBytes
	}
	if r.Failure != nil {
		return failureText(tool, r), ObsFailed
	}
	out := r.Output
	if looksHTML(r.ContentType, out) {
		body := htmlText(out)
		if looksLikeSignIn(body) {
			return fmt.Sprintf("Authentication failed: %s returned a sign-in page instead of data. "+
				"Re-authenticate or escalate to a person; retrying unchanged will return the same result.", tool), ObsFailed
		}
		return "The tool returned an HTML page; its text follows.\n" + bound(body, maxResultBytes, len(body), false), ObsOK
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return fmt.Sprintf("%s succeeded and returned no output.", tool), ObsOK
	}
	size := int(r.Size)
	if size < len(out) {
		size = len(out)
	}
	return bound(string(out), maxResultBytes, size, r.Truncated), ObsOK
}

// declinedText is the observation of a call a person declined, with the
// reason they gave when they gave one: quoted and escaped as a Go string
// literal (its line breaks and quotes escaped), so that it reads as their
// words on one line and cannot pass for the text around it, and cut at
// maxBytes.
func declinedText(tool, reason string, maxBytes int) string {
	text := fmt.Sprintf("A person declined this call to %s. It did not run; choose another route.", tool)
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResultBytes
	}
	if q := quotedReason(reason, maxBytes); q != "" {
		return text + " Their reason: " + q
	}
	return text
}

// quotedReason is a person's reason as text that cannot be mistaken for
// anything around it: trimmed, cut at maxBytes on a rune boundary (saying
// so), and Go-quoted; "" when there is none.
func quotedReason(reason string, maxBytes int) string {
	if reason = strings.TrimSpace(reason); reason == "" {
		return ""
	}
	cut := ""
	if len(reason) > maxBytes {
		reason, cut = clip.Head(reason, maxBytes), " [reason cut]"
	}
	return strconv.Quote(reason) + cut
}

// bound makes s valid UTF-8 and cuts it at max bytes on a rune boundary,
// saying where it was cut.
func bound(s string, max, size int, truncated bool) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max && !truncated {
		return s
	}
	i := len(clip.Head(s, max))
	total := "more than " + fmt.Sprint(i)
	if size > i && !truncated {
		total = fmt.Sprint(size)
	} else if size > len(s) {
		total = fmt.Sprint(size)
	}
	return s[:i] + fmt.Sprintf("\n[result cut at %d of %s bytes]", i, total)
}

func failureText(tool string, r Result) string {
	f := r.Failure
	detail := shortDetail(f.Detail, f.Kind == FailExit)
	switch f.Kind {
	case FailTimeout:
		return fmt.Sprintf("%s did not finish before its deadline and was stopped%s. "+
			"Retrying unchanged will likely time out again; try narrower arguments or another route.", tool, suffix(detail))
	case FailExit:
		return fmt.Sprintf("%s failed with exit code %d%s. "+
			"Retrying unchanged is unlikely to help unless the error says the problem is temporary.", tool, f.Code, suffix(detail))
	case FailHTTP:
		return httpFailureText(tool, f.Code, r)
	case FailUnavailable:
		return fmt.Sprintf("%s could not be reached%s. The dependency may be down: retrying later may help, or escalate to a person.", tool, suffix(detail))
	case FailInvalid:
		return fmt.Sprintf("The call to %s was not valid%s. Fix the arguments; retrying unchanged will fail the same way.", tool, suffix(detail))
	case FailUnknown:
		why := "The operator restarted while " + tool + " was running"
		if detail != "" {
			why = tool + " was interrupted (" + detail + ")"
		}
		return why + ", so whether it took effect is unknown. Check its effect before calling it again."
	case FailTool:
		return fmt.Sprintf("%s reported an error%s. Change the arguments or take another route; retrying unchanged will likely fail the same way.", tool, suffix(detail))
	}
	return fmt.Sprintf("%s failed%s.", tool, suffix(detail))
}

func httpFailureText(tool string, code int, r Result) string {
	body := ""
	if looksHTML(r.ContentType, r.Output) {
		body = htmlText(r.Output)
	} else {
		body = string(r.Output)
	}
	body = shortDetail(body, false)
	if d := shortDetail(r.Failure.Detail, false); d != "" {
		body = d // the executor's own account beats the raw body
	}
	switch {
	case code == 401:
		return fmt.Sprintf("Authentication failed (HTTP 401) calling %s%s. "+
			"Re-authenticate or escalate to a person; retrying unchanged will return the same result.", tool, suffix(body))
	case code == 403:
		return fmt.Sprintf("Access denied (HTTP 403) calling %s%s: the identity it runs as may not do this. "+
			"Ask for access or escalate to a person; retrying unchanged will return the same result.", tool, suffix(body))
	case code == 404:
		return fmt.Sprintf("Not found (HTTP 404) calling %s%s. Check the arguments; retrying unchanged will return the same result.", tool, suffix(body))
	case code == 408 || code == 429:
		return fmt.Sprintf("%s is rate limited or busy (HTTP %d)%s. Waiting before retrying may help; otherwise try another route.", tool, code, suffix(body))
	case code >= 500:
		return fmt.Sprintf("The service behind %s failed (HTTP %d)%s. A retry later may help; if it keeps failing, escalate.", tool, code, suffix(body))
	}
	return fmt.Sprintf("%s rejected the request (HTTP %d)%s. Change the arguments; retrying unchanged will return the same result.", tool, code, suffix(body))
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return ": " + detail
}

// shortDetail keeps a failure's detail short and readable: valid UTF-8,
// one line of whitespace, no stack trace (only the error line survives).
// For a process's stderr the end is kept, where the error usually is.
func shortDetail(s string, keepEnd bool) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if isStackTrace(s) {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		for _, l := range lines {
			l = strings.TrimSpace(l)
			if l != "" && !strings.HasPrefix(l, "goroutine ") && !strings.HasPrefix(l, "at ") &&
				!strings.HasPrefix(l, "File \"") && !strings.HasPrefix(l, "Traceback") && !strings.HasPrefix(l, "/") {
				s = l
				break
			}
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	if keepEnd && len(s) > 300 {
		return "…" + clip.Tail(s, 300)
	}
	return cut(s, 300)
}

func isStackTrace(s string) bool {
	return strings.Contains(s, "goroutine ") || strings.Contains(s, "Traceback (most recent call last)") ||
		strings.Contains(s, "\n\tat ") || strings.Contains(s, "\n    at ")
}

func looksHTML(contentType string, b []byte) bool {
	if strings.Contains(strings.ToLower(contentType), "html") {
		return true
	}
	head := bytes.TrimSpace(b[:min(len(b), 512)])
	if len(head) == 0 || head[0] != '<' {
		return false
	}
	h := strings.ToLower(string(head))
	return strings.HasPrefix(h, "<!doctype html") || strings.HasPrefix(h, "<html") || strings.Contains(h, "<head") || strings.Contains(h, "<body")
}

func looksLikeSignIn(text string) bool {
	t := strings.ToLower(text)
	t = clip.Head(t, 4096)
	for _, w := range []string{"sign in", "sign-in", "log in", "login", "signin", "single sign-on", "password"} {
		if strings.Contains(t, w) {
			return true
		}
	}
	return false
}

// htmlText extracts the visible text of an HTML document: no tags, no
// scripts or styles, whitespace collapsed.
func htmlText(b []byte) string {
	z := html.NewTokenizer(bytes.NewReader(b))
	var sb strings.Builder
	skip := 0
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return strings.Join(strings.Fields(sb.String()), " ")
		case html.StartTagToken, html.EndTagToken:
			name, _ := z.TagName()
			if n := string(name); n == "script" || n == "style" || n == "noscript" || n == "template" {
				if tt == html.StartTagToken {
					skip++
				} else if skip > 0 {
					skip--
				}
			}
			sb.WriteByte(' ')
		case html.TextToken:
			if skip == 0 {
				sb.Write(z.Text())
			}
		}
	}
}
