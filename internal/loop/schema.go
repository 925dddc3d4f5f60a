package loop

import "github.com/santhosh-tekuri/jsonschema/v6"

// CompileSchema compiles a JSON Schema the way the engine compiles tool
// parameters and spec.output.schema: references inside the schema only,
// nothing loaded from files or URLs. what names the schema in errors.
func CompileSchema(what, url string, raw []byte) (*jsonschema.Schema, error) {
	return compileSchema(what, url, raw)
}

// SchemaError says, bounded and in English, where a value breaks a
// schema: each failing location with what it breaks.
func SchemaError(err error) string { return schemaError(err) }
