package config

import (
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
)

// decoder evaluates attributes and collects every problem as a diagnostic
// with a source range; it never stops at the first.
type decoder struct {
	ctx   *hcl.EvalContext
	diags hcl.Diagnostics
	dir   string // the configuration file's folder, for relative paths

	// What later checks need to know of blocks decoded earlier.
	listenRange, tlsRange, limiterRange hcl.Range
	subjectHasKeys, subjectHasPrincipal bool
	maxBodyBytes                        int64
}

func newDecoder(dir string) *decoder {
	d := &decoder{dir: dir}
	d.ctx = &hcl.EvalContext{Functions: map[string]function.Function{
		"env":  envFunction,
		"file": d.fileFunction(),
	}}
	return d
}

// envFunction is env("NAME") or env("NAME", "default"). An unset variable
// with no default is an error: a secret must not silently be empty.
var envFunction = function.New(&function.Spec{
	Params:   []function.Parameter{{Name: "name", Type: cty.String}},
	VarParam: &function.Parameter{Name: "default", Type: cty.String},
	Type:     function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		if len(args) > 2 {
			return cty.NilVal, fmt.Errorf("env takes a name and at most one default")
		}
		name := args[0].AsString()
		if v, ok := os.LookupEnv(name); ok {
			return cty.StringVal(v), nil
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return cty.NilVal, fmt.Errorf("environment variable %s is not set", name)
	},
})

// fileFunction is file("path"): the file's contents without a trailing
// newline, the path relative to the configuration file.
func (d *decoder) fileFunction() function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			b, err := os.ReadFile(d.path(args[0].AsString()))
			if err != nil {
				return cty.NilVal, err
			}
			return cty.StringVal(strings.TrimRight(string(b), "\r\n")), nil
		},
	})
}

func (d *decoder) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(d.dir, p)
}

func (d *decoder) errorf(rng hcl.Range, summary, detail string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detail, args...),
		Subject:  rng.Ptr(),
	})
}

func (d *decoder) content(body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	c, diags := body.Content(schema)
	d.diags = append(d.diags, diags...)
	return c
}

func (d *decoder) value(attr *hcl.Attribute, ty cty.Type) (cty.Value, bool) {
	v, diags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if v.IsNull() {
		d.errorf(attr.Expr.Range(), "Missing value", "%s must not be null.", attr.Name)
		return cty.NilVal, false
	}
	v, err := convert.Convert(v, ty)
	if err != nil {
		d.errorf(attr.Expr.Range(), "Wrong type", "%s must be %s: %s.", attr.Name, ty.FriendlyName(), err)
		return cty.NilVal, false
	}
	return v, true
}

func (d *decoder) str(attrs hcl.Attributes, name, def string) string {
	a, ok := attrs[name]
	if !ok {
		return def
	}
	v, ok := d.value(a, cty.String)
	if !ok {
		return def
	}
	return v.AsString()
}

func (d *decoder) boolean(attrs hcl.Attributes, name string, def bool) bool {
	a, ok := attrs[name]
	if !ok {
		return def
	}
	v, ok := d.value(a, cty.Bool)
	if !ok {
		return def
	}
	return v.True()
}

// integer decodes a whole number no smaller than min.
func (d *decoder) integer(attrs hcl.Attributes, name string, def, min int64) int64 {
	a, ok := attrs[name]
	if !ok {
		return def
	}
	v, ok := d.value(a, cty.Number)
	if !ok {
		return def
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if acc != big.Exact || !bf.IsInt() {
		d.errorf(a.Expr.Range(), "Not a whole number", "%s must be a whole number.", name)
		return def
	}
	if n < min {
		d.errorf(a.Expr.Range(), "Value too small", "%s must be at least %d.", name, min)
		return def
	}
	return n
}

// duration decodes a Go duration string ("750ms", "1m") no shorter than min.
func (d *decoder) duration(attrs hcl.Attributes, name string, def, min time.Duration) time.Duration {
	a, ok := attrs[name]
	if !ok {
		return def
	}
	v, ok := d.value(a, cty.String)
	if !ok {
		return def
	}
	dur, err := time.ParseDuration(v.AsString())
	if err != nil {
		d.errorf(a.Expr.Range(), "Invalid duration", "%s must be a duration such as \"750ms\" or \"1m\": %s.", name, err)
		return def
	}
	if dur < min {
		d.errorf(a.Expr.Range(), "Duration too short", "%s must be at least %s.", name, min)
		return def
	}
	return dur
}

// listItem is one element of a string list with its own range, so a bad
// element is pointed at, not the whole list.
type listItem struct {
	value string
	rng   hcl.Range
}

func (d *decoder) list(attrs hcl.Attributes, name string) ([]listItem, bool) {
	a, ok := attrs[name]
	if !ok {
		return nil, false
	}
	exprs, diags := hcl.ExprList(a.Expr)
	if diags.HasErrors() {
		// Not a literal list: evaluate it whole.
		v, ok := d.value(a, cty.List(cty.String))
		if !ok {
			return nil, true
		}
		var out []listItem
		for _, e := range v.AsValueSlice() {
			out = append(out, listItem{e.AsString(), a.Expr.Range()})
		}
		return out, true
	}
	var out []listItem
	for _, e := range exprs {
		v, diags := e.Value(d.ctx)
		d.diags = append(d.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		v, err := convert.Convert(v, cty.String)
		if err != nil || v.IsNull() {
			d.errorf(e.Range(), "Wrong type", "each element of %s must be a string.", name)
			continue
		}
		out = append(out, listItem{v.AsString(), e.Range()})
	}
	return out, true
}

// secret decodes an attribute that must come from env() or file(), so that
// no secret is written into the configuration file itself.
func (d *decoder) secret(attrs hcl.Attributes, name string) (string, bool) {
	a, ok := attrs[name]
	if !ok {
		return "", false
	}
	call, ok := a.Expr.(*hclsyntax.FunctionCallExpr)
	if !ok || (call.Name != "env" && call.Name != "file") {
		d.errorf(a.Expr.Range(), "Secret written in the file", "%s must come from env(\"NAME\") or file(\"path\"), not from the configuration file itself.", name)
		return "", false
	}
	v, ok := d.value(a, cty.String)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// unique reports the second block of a kind that may appear only once.
func (d *decoder) single(blocks hcl.Blocks, kind string) *hcl.Block {
	var first *hcl.Block
	for _, b := range blocks {
		if b.Type != kind {
			continue
		}
		if first != nil {
			d.errorf(b.DefRange, "Duplicate "+kind+" block", "Only one %s block is allowed; the first is at %s.", kind, first.DefRange)
			continue
		}
		first = b
	}
	return first
}

func isName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
