package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/edgegate/gateway/subject"
)

// LookupEnv reads an environment variable, as os.LookupEnv does; env()
// calls it. Tests pass their own.
type LookupEnv func(name string) (string, bool)

// checker turns decoded blocks into typed options and collects every
// problem as a diagnostic with a source range; it never stops at the first.
type checker struct {
	ctx   *hcl.EvalContext
	diags hcl.Diagnostics
	dir   string // the configuration file's folder, for relative paths
	// failed are the expressions gohcl could not decode, already reported:
	// what it left in their fields is not checked again.
	failed []hcl.Range
	// elements are the ranges of list elements read, by the field a
	// package's Validate names them by ("tls.acme.domains[0]").
	elements map[string]hcl.Range
	// pools are the names of the upstream blocks, broken ones included, so
	// that a route naming a broken one is not reported a second time.
	pools map[string]bool
}

func newChecker(dir string, env LookupEnv) *checker {
	c := &checker{dir: dir, elements: map[string]hcl.Range{}}
	c.ctx = &hcl.EvalContext{Functions: map[string]function.Function{
		"env":  envFunction(env),
		"file": c.fileFunction(),
	}}
	return c
}

// envFunction is env("NAME") or env("NAME", "default"). An unset variable
// with no default is an error: a secret must not silently be empty.
func envFunction(lookup LookupEnv) function.Function {
	return function.New(&function.Spec{
		Params:   []function.Parameter{{Name: "name", Type: cty.String}},
		VarParam: &function.Parameter{Name: "default", Type: cty.String},
		Type:     function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if len(args) > 2 {
				return cty.NilVal, fmt.Errorf("env takes a name and at most one default")
			}
			name := args[0].AsString()
			if v, ok := lookup(name); ok {
				return cty.StringVal(v), nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return cty.NilVal, fmt.Errorf("environment variable %s is not set", name)
		},
	})
}

// fileFunction is file("path"): the file's contents without a trailing
// newline, the path relative to the configuration file.
func (c *checker) fileFunction() function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			b, err := readFile(c.path(args[0].AsString()), maxFileBytes)
			if err != nil {
				return cty.NilVal, err
			}
			return cty.StringVal(strings.TrimRight(string(b), "\r\n")), nil
		},
	})
}

// maxFileBytes bounds what file() reads: it holds a secret, and a path such
// as /dev/zero must not be read until memory runs out.
const maxFileBytes = 1 << 20

// readFile reads the regular file at path, refusing it when it holds more
// than limit bytes. A device, FIFO or socket is refused unread: it could
// block, or never end.
func readFile(path string, limit int64) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// path resolves p against the configuration file's folder.
func (c *checker) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.dir, p)
}

func (c *checker) errorf(rng hcl.Range, summary, detail string, args ...any) {
	c.diags = append(c.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detail, args...),
		Subject:  rng.Ptr(),
	})
}

// or is *p, or def when the attribute was absent (or failed to decode,
// which is already reported).
func or[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// decoded records what gohcl reported, so that the check pass neither
// checks a value it failed to decode nor reports that failure twice.
func (c *checker) decoded(diags hcl.Diagnostics) {
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if d.Context != nil {
			c.failed = append(c.failed, *d.Context)
		} else if d.Subject != nil {
			c.failed = append(c.failed, *d.Subject)
		}
	}
	c.diags = append(c.diags, diags...)
}

func (c *checker) decodeFailed(rng hcl.Range) bool {
	for _, f := range c.failed {
		if f.Overlaps(rng) {
			return true
		}
	}
	return false
}

// nulls reports every attribute of body, at any depth, whose value is
// null: gohcl would take it for an absent attribute, and a required one
// would pass unnoticed.
func (c *checker) nulls(body hcl.Body) {
	b, ok := body.(*hclsyntax.Body)
	if !ok {
		return
	}
	for _, a := range b.Attributes {
		if v, diags := a.Expr.Value(c.ctx); !diags.HasErrors() && v.IsNull() {
			c.errorf(a.Expr.Range(), "Missing value", "%s must not be null.", a.Name)
		}
	}
	for _, blk := range b.Blocks {
		c.nulls(blk.Body)
	}
}

// integer is *p, the attribute name of body, at least min; def when
// absent (a nil p, or a required attribute that is missing, which decoding
// has reported).
func (c *checker) integer(p *int64, body hcl.Body, name string, def, min int64) int64 {
	rng := valueRange(body, name)
	if p == nil || rng == (hcl.Range{}) || c.decodeFailed(rng) {
		return def
	}
	if *p < min {
		c.errorf(rng, "Value too small", "%s must be at least %d.", name, min)
		return def
	}
	return *p
}

// duration parses the Go duration string ("750ms", "1m") of the attribute
// name of body, no shorter than min; def when absent.
func (c *checker) duration(p *string, body hcl.Body, name string, def, min time.Duration) time.Duration {
	d, ok := c.parseDuration(p, body, name)
	if !ok {
		return def
	}
	if d < min {
		c.errorf(valueRange(body, name), "Duration too short", "%s must be at least %s.", name, min)
		return def
	}
	return d
}

// durationOr is the duration of the attribute name of body, any at all;
// def when absent. What it may be is the option's Validate's to say.
func (c *checker) durationOr(p *string, body hcl.Body, name string, def time.Duration) time.Duration {
	if d, ok := c.parseDuration(p, body, name); ok {
		return d
	}
	return def
}

// optionDuration is the duration of the attribute name of body for an
// option whose zero is its default: 0 when absent, and a 0 the file writes
// passed on as negative, below any minimum, for the option's Validate to
// refuse. What it may be is the option's Validate's to say.
func (c *checker) optionDuration(p *string, body hcl.Body, name string) time.Duration {
	d := c.durationOr(p, body, name, 0)
	if p != nil && d == 0 {
		d = -1
	}
	return d
}

// optionInt is optionDuration for a whole number.
func optionInt(p *int64) int {
	switch {
	case p == nil:
		return 0
	case *p == 0:
		return -1
	}
	return int(*p)
}

// optionString is the attribute's string for an option whose empty value
// is its default or none: "" when absent, and an empty value the file
// writes passed on as blank for the option's Validate to refuse.
func optionString(p *string) string {
	switch {
	case p == nil:
		return ""
	case *p == "":
		return " "
	}
	return *p
}

// parseDuration parses the Go duration string of the attribute name of
// body; false when absent or reported.
func (c *checker) parseDuration(p *string, body hcl.Body, name string) (time.Duration, bool) {
	rng := valueRange(body, name)
	if p == nil || c.decodeFailed(rng) {
		return 0, false
	}
	d, err := time.ParseDuration(*p)
	if err != nil {
		c.errorf(rng, "Invalid duration", "%s must be a duration such as \"750ms\" or \"1m\": %s.", name, err)
		return 0, false
	}
	return d, true
}

// listItem is one element of a string list with its own range, so a bad
// element is pointed at, not the whole list.
type listItem struct {
	value string
	rng   hcl.Range
}

// list evaluates a list of strings element by element.
func (c *checker) list(expr hcl.Expression, name string) []listItem {
	exprs, diags := hcl.ExprList(expr)
	if diags.HasErrors() {
		// Not a literal list: evaluate it whole.
		v, ok := c.value(expr, name, cty.List(cty.String))
		if !ok {
			return nil
		}
		var out []listItem
		for _, e := range v.AsValueSlice() {
			if e.IsNull() {
				c.errorf(expr.Range(), "Wrong type", "each element of %s must be a string.", name)
				continue
			}
			out = append(out, listItem{e.AsString(), expr.Range()})
		}
		return out
	}
	var out []listItem
	for _, e := range exprs {
		v, diags := e.Value(c.ctx)
		c.diags = append(c.diags, diags...)
		if diags.HasErrors() {
			continue
		}
		v, err := convert.Convert(v, cty.String)
		if err != nil || v.IsNull() {
			c.errorf(e.Range(), "Wrong type", "each element of %s must be a string.", name)
			continue
		}
		out = append(out, listItem{v.AsString(), e.Range()})
	}
	return out
}

// mapItem is one pair of a map of strings, each side with its own range.
type mapItem struct {
	key, value           string
	keyRange, valueRange hcl.Range
}

// stringMap evaluates a map of strings pair by pair, in the order of the
// file, so that a key written twice is seen twice.
func (c *checker) stringMap(expr hcl.Expression, name string) []mapItem {
	pairs, diags := hcl.ExprMap(expr)
	if diags.HasErrors() {
		// Not a literal map: evaluate it whole.
		v, ok := c.value(expr, name, cty.Map(cty.String))
		if !ok {
			return nil
		}
		var out []mapItem
		for k, e := range v.AsValueMap() {
			if e.IsNull() {
				c.errorf(expr.Range(), "Wrong type", "each value of %s must be a string.", name)
				continue
			}
			out = append(out, mapItem{k, e.AsString(), expr.Range(), expr.Range()})
		}
		slices.SortFunc(out, func(a, b mapItem) int { return strings.Compare(a.key, b.key) })
		return out
	}
	var out []mapItem
	for _, p := range pairs {
		k, kdiags := p.Key.Value(c.ctx)
		v, vdiags := p.Value.Value(c.ctx)
		c.diags = append(c.diags, kdiags...)
		c.diags = append(c.diags, vdiags...)
		if kdiags.HasErrors() || vdiags.HasErrors() {
			continue
		}
		k, kerr := convert.Convert(k, cty.String)
		if kerr != nil || k.IsNull() {
			c.errorf(p.Key.Range(), "Wrong type", "each key of %s must be a string.", name)
			continue
		}
		v, verr := convert.Convert(v, cty.String)
		if verr != nil || v.IsNull() {
			c.errorf(p.Value.Range(), "Wrong type", "each value of %s must be a string.", name)
			continue
		}
		out = append(out, mapItem{k.AsString(), v.AsString(), p.Key.Range(), p.Value.Range()})
	}
	return out
}

func (c *checker) value(expr hcl.Expression, name string, ty cty.Type) (cty.Value, bool) {
	v, diags := expr.Value(c.ctx)
	c.diags = append(c.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	if v.IsNull() {
		c.errorf(expr.Range(), "Missing value", "%s must not be null.", name)
		return cty.NilVal, false
	}
	v, err := convert.Convert(v, ty)
	if err != nil {
		c.errorf(expr.Range(), "Wrong type", "%s must be %s: %s.", name, ty.FriendlyName(), err)
		return cty.NilVal, false
	}
	return v, true
}

// secret evaluates an attribute that must come from env() or file(), so
// that no secret is written into the configuration file itself.
func (c *checker) secret(expr hcl.Expression, name string) (string, bool) {
	call, ok := expr.(*hclsyntax.FunctionCallExpr)
	if !ok || (call.Name != "env" && call.Name != "file") {
		c.errorf(expr.Range(), "Secret written in the file", "%s must come from env(\"NAME\") or file(\"path\"), not from the configuration file itself.", name)
		return "", false
	}
	v, ok := c.value(expr, name, cty.String)
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

// sortDiagnostics orders diagnostics as they stand in the file, so that
// problems found while decoding and while checking read top to bottom. A
// gohcl "Unsuitable value type" that only repeats an error reported just
// before it inside the same expression (an env() that failed) is dropped.
func sortDiagnostics(diags hcl.Diagnostics) hcl.Diagnostics {
	out := diags[:0:0]
	for i, d := range diags {
		if d.Summary == "Unsuitable value type" && d.Context != nil && reportedWithin(diags[:i], d) {
			continue
		}
		out = append(out, d)
	}
	slices.SortStableFunc(out, func(a, b *hcl.Diagnostic) int {
		switch {
		case a.Subject == nil && b.Subject == nil:
			return 0
		case a.Subject == nil:
			return -1
		case b.Subject == nil:
			return 1
		}
		if c := strings.Compare(a.Subject.Filename, b.Subject.Filename); c != 0 {
			return c
		}
		return a.Subject.Start.Byte - b.Subject.Start.Byte
	})
	return out
}

func reportedWithin(diags hcl.Diagnostics, d *hcl.Diagnostic) bool {
	for _, o := range diags {
		if o.Severity == hcl.DiagError && o.Subject != nil && d.Context.Overlaps(*o.Subject) {
			return true
		}
	}
	return false
}

// isName reports whether s is a name of the file: a policy's, a route's
// label, a plan's, a header's the gateway reads.
func isName(s string) bool { return subject.ValidName(s) }

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}
