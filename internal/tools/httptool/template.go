package httptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/agentrun/agentrun/internal/weakcache"
)

// The templates are text/template over the call's arguments object (map
// keys are argument names: {{.email}}). Every value an action prints is
// escaped for where it lands, the way html/template does for HTML: the
// parse tree is walked in document order, the position of each action is
// worked out from the literal text before it, and an escaping function is
// appended to the action's pipeline. Template authors write {{.email}},
// never an escaping function of their own.
//
// URL templates:
//   - in the path, a value is one path segment (url.PathEscape: "a/b"
//     becomes "a%2Fb");
//   - in the query or fragment, url.QueryEscape ("a&b=c" stays one value);
//   - in the scheme or host, values are not allowed: the model must not
//     choose where a request goes.
//
// Body templates, by the body's content type:
//   - JSON (application/json, anything +json, or no Content-Type header,
//     which then defaults to application/json): inside a JSON string a
//     value is escaped as string content ("a\"b"); outside a string it is
//     written as a JSON value (json.Marshal: strings quoted, numbers and
//     objects as they are), so {"amount": {{.amount}}} stays well-formed
//     whatever the model sends. {{json .x}} writes x as a JSON value and
//     is left alone outside strings;
//   - application/x-www-form-urlencoded: url.QueryEscape;
//   - anything else: values are written as they are (the type's escaping
//     is not known); such bodies are the manifest author's responsibility.
//
// A value that is not a string is printed as JSON (numbers keep their
// digits; null is empty in a URL). Branches of {{if}}, {{with}} and
// {{range}} must end where they started (inside or outside a JSON string,
// in the path or the query), as html/template requires too.

// textKind selects the escaping rules of a template.
type textKind int

const (
	kindURL textKind = iota
	kindJSON
	kindForm
	kindRaw
)

func (k textKind) String() string {
	return [...]string{"URL", "JSON body", "form body", "body"}[k]
}

// position is where an action prints, within its kind.
type position int

const (
	// URL positions.
	posScheme position = iota
	posAuthority
	posPath
	posQuery
	posFragment
	// JSON positions.
	posJSONValue
	posJSONString
	posJSONStringEscape
	// Form and raw bodies have one position.
	posPlain
)

func (p position) String() string {
	return [...]string{"scheme", "host", "path", "query", "fragment",
		"JSON value", "JSON string", "JSON string escape", "body"}[p]
}

// Names of the escaping functions appended to pipelines. They are not
// meant to be written by hand (nothing stops it; it is merely pointless).
const (
	escPathFunc   = "_agentrun_path"
	escQueryFunc  = "_agentrun_query"
	escStringFunc = "_agentrun_jsonstring"
	escValueFunc  = "_agentrun_jsonvalue"
	escRawFunc    = "_agentrun_raw"
	// jsonFunc is offered to template authors.
	jsonFunc = "json"
)

var funcs = template.FuncMap{
	escPathFunc:   pathSegment,
	escQueryFunc:  func(v any) (string, error) { s, err := text(v); return url.QueryEscape(s), err },
	escStringFunc: jsonStringContent,
	escValueFunc:  jsonValue,
	escRawFunc:    text,
	jsonFunc:      jsonValue,
}

// pathSegment escapes a value for the path with url.PathEscape, and also
// the dots of a value that is "." or ".." (which PathEscape leaves as they
// are, and which a server would resolve to another path). The request
// still refuses a URL whose decoded path has such a segment (see
// dotSegment): servers decode %2E too.
func pathSegment(v any) (string, error) {
	s, err := text(v)
	if s == "." || s == ".." {
		return strings.ReplaceAll(s, ".", "%2E"), err
	}
	return url.PathEscape(s), err
}

// forbidden are text/template's own escapers: with automatic escaping they
// would escape twice.
var forbidden = map[string]bool{"urlquery": true, "html": true, "js": true}

// templateKey names one parsed template.
type templateKey struct {
	name, src string
	kind      textKind
}

// Templates shares parsed templates between executors: the runs a
// platform starts declare the same tools, a parsed template (a few KiB)
// is read-only and safe to execute concurrently. An entry lives as long as
// an executor holds its template (a weak pointer, dropped by a cleanup).
// Whoever builds many executors keeps one (kit.Builder) and gives it to
// each (WithTemplates). The zero value is ready.
type Templates struct {
	cache weakcache.Cache[templateKey, template.Template]
}

// parse returns the template parsed from the same name, source and kind
// that another executor holds, or parses it. A nil t parses every time.
func (t *Templates) parse(name, src string, kind textKind) (*template.Template, error) {
	if t == nil {
		return parseNewTemplate(name, src, kind)
	}
	return t.cache.Get(templateKey{name, src, kind}, func() (*template.Template, error) {
		return parseNewTemplate(name, src, kind)
	})
}

// parseNewTemplate parses src and inserts the escaping functions. The
// result fails on a missing argument instead of printing "<no value>".
func parseNewTemplate(name, src string, kind textKind) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(src)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, fmt.Errorf("%s template: {{define}} and {{block}} are not supported", kind)
	}
	if t.Tree == nil || t.Root == nil {
		return t, nil
	}
	esc := escaper{kind: kind, name: name, tree: t.Tree}
	start := posPlain
	switch kind {
	case kindURL:
		start = posScheme
	case kindJSON:
		start = posJSONValue
	}
	end, err := esc.list(t.Root, start)
	if err != nil {
		return nil, err
	}
	if kind == kindURL && end == posScheme {
		return nil, fmt.Errorf("URL template %q is not an absolute http(s) URL", src)
	}
	if kind == kindJSON && end != posJSONValue {
		return nil, fmt.Errorf("JSON body template ends inside a string")
	}
	return t, nil
}

type escaper struct {
	kind textKind
	name string
	tree *parse.Tree
}

func (e *escaper) errorf(n parse.Node, format string, args ...any) error {
	loc, _ := e.tree.ErrorContext(n)
	return fmt.Errorf("%s template: %s: %s", e.kind, loc, fmt.Sprintf(format, args...))
}

func (e *escaper) list(l *parse.ListNode, p position) (position, error) {
	if l == nil {
		return p, nil
	}
	for _, n := range l.Nodes {
		var err error
		if p, err = e.node(n, p); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (e *escaper) node(n parse.Node, p position) (position, error) {
	switch n := n.(type) {
	case *parse.TextNode:
		return e.scan(n.Text, p), nil
	case *parse.ActionNode:
		if len(n.Pipe.Decl) > 0 {
			return p, nil // {{$x := ...}} prints nothing
		}
		return p, e.escape(n, p)
	case *parse.IfNode:
		return e.branch(n, &n.BranchNode, "if", p)
	case *parse.WithNode:
		return e.branch(n, &n.BranchNode, "with", p)
	case *parse.RangeNode:
		return e.branch(n, &n.BranchNode, "range", p)
	case *parse.CommentNode, *parse.BreakNode, *parse.ContinueNode:
		return p, nil
	case *parse.TemplateNode:
		return p, e.errorf(n, "{{template}} is not supported")
	}
	return p, e.errorf(n, "unsupported template construct %s", n)
}

// branch requires every way through an {{if}}, {{with}} or {{range}} to end
// where it began, so that what follows is escaped correctly whichever way
// the template goes.
func (e *escaper) branch(n parse.Node, b *parse.BranchNode, what string, p position) (position, error) {
	if err := e.checkPipe(n, b.Pipe); err != nil {
		return p, err
	}
	after, err := e.list(b.List, p)
	if err != nil {
		return p, err
	}
	afterElse, err := e.list(b.ElseList, p)
	if err != nil {
		return p, err
	}
	if after != p || afterElse != p {
		return p, e.errorf(n, "the {{%s}} starts in the %s and ends in the %s; "+
			"put whole parts (a query parameter, a quoted string) inside it", what, p, other(p, after, afterElse))
	}
	return p, nil
}

func other(p, a, b position) position {
	if a != p {
		return a
	}
	return b
}

// checkPipe rejects text/template's own escapers.
func (e *escaper) checkPipe(n parse.Node, pipe *parse.PipeNode) error {
	if pipe == nil {
		return nil
	}
	for _, c := range pipe.Cmds {
		for _, a := range c.Args {
			if id, ok := a.(*parse.IdentifierNode); ok && forbidden[id.Ident] {
				return e.errorf(n, "values are escaped automatically; remove %q", id.Ident)
			}
		}
	}
	return nil
}

// escape appends the escaping function for position p to an action.
func (e *escaper) escape(n *parse.ActionNode, p position) error {
	if err := e.checkPipe(n, n.Pipe); err != nil {
		return err
	}
	var fn string
	switch p {
	case posScheme, posAuthority:
		return e.errorf(n, "arguments may not choose the scheme or host of the URL; put them in the path or query")
	case posPath:
		fn = escPathFunc
	case posQuery, posFragment:
		fn = escQueryFunc
	case posJSONValue:
		if last := n.Pipe.Cmds[len(n.Pipe.Cmds)-1]; isIdent(last.Args[0], jsonFunc) {
			return nil // already a JSON value
		}
		fn = escValueFunc
	case posJSONString:
		fn = escStringFunc
	case posJSONStringEscape:
		return e.errorf(n, "a value may not follow a backslash inside a JSON string")
	case posPlain:
		fn = escRawFunc
		if e.kind == kindForm {
			fn = escQueryFunc
		}
	}
	n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{
		NodeType: parse.NodeCommand,
		Pos:      n.Pos,
		Args:     []parse.Node{parse.NewIdentifier(fn).SetTree(e.tree).SetPos(n.Pos)},
	})
	return nil
}

func isIdent(n parse.Node, name string) bool {
	id, ok := n.(*parse.IdentifierNode)
	return ok && id.Ident == name
}

// scan moves the position over literal text.
func (e *escaper) scan(text []byte, p position) position {
	for len(text) > 0 {
		switch p {
		case posScheme:
			i := bytes.Index(text, []byte("://"))
			if i < 0 {
				return p
			}
			p, text = posAuthority, text[i+3:]
		case posAuthority:
			i := bytes.IndexAny(text, "/?#")
			if i < 0 {
				return p
			}
			p, text = urlPosition(text[i]), text[i+1:]
		case posPath, posQuery:
			i := bytes.IndexAny(text, "?#")
			if p == posQuery {
				i = bytes.IndexByte(text, '#')
			}
			if i < 0 {
				return p
			}
			p, text = urlPosition(text[i]), text[i+1:]
		case posJSONValue:
			i := bytes.IndexByte(text, '"')
			if i < 0 {
				return p
			}
			p, text = posJSONString, text[i+1:]
		case posJSONString:
			i := bytes.IndexAny(text, `"\`)
			if i < 0 {
				return p
			}
			if text[i] == '"' {
				p = posJSONValue
			} else {
				p = posJSONStringEscape
			}
			text = text[i+1:]
		case posJSONStringEscape:
			p, text = posJSONString, text[1:]
		default: // posFragment, posPlain: nothing changes the position
			return p
		}
	}
	return p
}

func urlPosition(c byte) position {
	switch c {
	case '?':
		return posQuery
	case '#':
		return posFragment
	}
	return posPath
}

// text prints an argument value as plain text: strings as they are, other
// values as JSON, null as nothing.
func text(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return jsonValue(v)
}

// jsonValue writes v as a JSON value, without HTML escaping.
func jsonValue(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// jsonStringContent escapes v's text for the inside of a JSON string.
func jsonStringContent(v any) (string, error) {
	s, err := text(v)
	if err != nil {
		return "", err
	}
	q, err := jsonValue(s)
	if err != nil {
		return "", err
	}
	return q[1 : len(q)-1], nil
}

var missingKey = regexp.MustCompile(`map has no entry for key "([^"]*)"`)

// execError turns a template execution error into the detail of an
// InvalidCall failure.
func execError(what string, err error) string {
	if m := missingKey.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Sprintf("argument %q is missing", m[1])
	}
	var ee template.ExecError
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return fmt.Sprintf("%s template: %v", what, err)
}
