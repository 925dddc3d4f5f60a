package httptool_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/httptool"
)

// Values land escaped for where they are: a path segment, a query value,
// a JSON string, a JSON value. The model cannot add a query parameter or a
// JSON field by putting `&` or `"` in an argument.
func ExampleNew() {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s\n%s", r.Method, r.URL.RequestURI(), body)
	}))
	defer echo.Close()

	e, err := httptool.New(httptool.Config{
		URL:  echo.URL + "/accounts/{{.account}}/notes?by={{.author}}",
		Body: `{"text": "{{.text}}", "pinned": {{.pinned}}}`,
	}, nil)
	if err != nil {
		panic(err)
	}
	res := e.Execute(context.Background(), loop.Invocation{
		CallID:    "t1-c1",
		Arguments: []byte(`{"account": "acct/42", "author": "r&d=1", "text": "say \"hi\"", "pinned": true}`),
		// A run's invocations carry the tool's timeout and result limit
		// (the engine's defaults when the manifest sets none).
		Timeout: loop.DefaultToolTimeout, MaxResultBytes: loop.DefaultMaxResultBytes,
	})
	fmt.Println(string(res.Output))
	// Output:
	// POST /accounts/acct%2F42/notes?by=r%26d%3D1
	// {"text": "say \"hi\"", "pinned": true}
}
