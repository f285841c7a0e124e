package config

import (
	"errors"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/edgegate/gateway/internal/option"
)

// Each block keeps its body (`hcl:",body"`), so that a problem is pointed
// at the attribute it is about by the attribute's name alone: the schema
// holds one field per attribute, its value, and no ranges beside it.

// attribute is the attribute name of body as the file writes it, or nil
// when it is absent.
func attribute(body hcl.Body, name string) *hclsyntax.Attribute {
	if b, ok := body.(*hclsyntax.Body); ok {
		return b.Attributes[name]
	}
	return nil
}

// has reports whether body sets the attribute name.
func has(body hcl.Body, name string) bool { return attribute(body, name) != nil }

// valueRange is the range of the value of the attribute name of body; the
// zero Range when it is absent.
func valueRange(body hcl.Body, name string) hcl.Range {
	if a := attribute(body, name); a != nil {
		return a.Expr.Range()
	}
	return hcl.Range{}
}

// nameRange is the range of the attribute's name.
func nameRange(body hcl.Body, name string) hcl.Range {
	if a := attribute(body, name); a != nil {
		return a.NameRange
	}
	return hcl.Range{}
}

// attrRange is the range of the whole attribute, name to value.
func attrRange(body hcl.Body, name string) hcl.Range {
	if a := attribute(body, name); a != nil {
		return a.SrcRange
	}
	return hcl.Range{}
}

// blockRange is the whole of a block: its header and its body.
func blockRange(def hcl.Range, body hcl.Body) hcl.Range {
	if b, ok := body.(*hclsyntax.Body); ok {
		return hcl.RangeOver(def, b.SrcRange)
	}
	return def
}

// refusedAt reports at rng the problems of err, a package's refusal of
// the value written there (a name it does not know).
func (c *checker) refusedAt(rng hcl.Range, err error) {
	for _, p := range fieldProblems(err, "Invalid value") {
		c.errorf(rng, p.Summary, "%s", p.Detail)
	}
}

// fieldProblems are the problems in err, in order. An error that names no
// field is a problem of the whole block, with summary.
func fieldProblems(err error, summary string) []option.Error {
	switch e := err.(type) {
	case nil:
		return nil
	case *option.Error:
		return []option.Error{*e}
	case interface{ Unwrap() []error }:
		var out []option.Error
		for _, each := range e.Unwrap() {
			out = append(out, fieldProblems(each, summary)...)
		}
		return out
	case interface{ Unwrap() error }:
		// Context around field problems (the policy's name) is the
		// block's already; around anything else it is kept.
		var oe *option.Error
		if errors.As(err, &oe) {
			return fieldProblems(e.Unwrap(), summary)
		}
	}
	return []option.Error{{Summary: summary, Detail: err.Error() + "."}}
}

// finder finds the field a problem names in the file: the range to point
// at and the range an earlier error there would be in; false when the
// field is not written.
type finder func(field string) (point, whole hcl.Range, ok bool)

// finderOf finds a field among what config read of a part of the file:
// an element it recorded (elements), a block by its path (defs: its
// definition), or an attribute "path.name" of the block at path in bodies
// ("" is the part's own body): its value, within the whole attribute.
func finderOf(bodies map[string]hcl.Body, defs, elements map[string]hcl.Range) finder {
	return func(field string) (hcl.Range, hcl.Range, bool) {
		if rng, ok := elements[field]; ok {
			return rng, rng, true
		}
		if def, ok := defs[field]; ok {
			return def, def, true
		}
		block, name := "", field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			block, name = field[:i], field[i+1:]
		}
		if a := attribute(bodies[block], name); a != nil {
			return a.Expr.Range(), a.SrcRange, true
		}
		if def, ok := defs[block]; ok && block != "" {
			// Absent from a nested block: that is reported already
			// where the block says so.
			return def, blockRange(def, bodies[block]), true
		}
		return hcl.Range{}, hcl.Range{}, false
	}
}

// fields reports the problems err holds, each at the range find gives
// the field it names. A field find does not know (an absent attribute),
// and a problem of the whole block, is reported at def. A problem where an
// error is already reported (the attribute failed to decode, or a check of
// the file's own found it) is not reported again.
// Problems of the fields skip are the file's to say, and left out.
func (c *checker) fields(err error, summary string, def hcl.Range, find finder, skip ...string) {
	for _, p := range fieldProblems(err, summary) {
		if slices.Contains(skip, p.Field) {
			continue
		}
		rng, whole := def, def
		if p.Field != "" {
			if point, w, ok := find(p.Field); ok {
				rng, whole = point, w
			}
		}
		if c.reportedFor(rng, whole) {
			continue
		}
		detail := p.Detail
		if p.Earlier != "" {
			if r, _, ok := find(p.Earlier); ok {
				detail = strings.Replace(detail, " at "+p.Earlier, " at "+r.String(), 1)
			}
		}
		c.errorf(rng, p.Summary, "%s", detail)
	}
}

// reportedFor reports whether the problem of a field written at point,
// within whole (its attribute, name and value), is reported already: the
// value failed to decode, or an error is reported at the attribute itself.
// An error at a part of the value (one element of a list) is another
// problem.
func (c *checker) reportedFor(point, whole hcl.Range) bool {
	if c.decodeFailed(point) {
		return true
	}
	for _, d := range c.diags {
		if d.Severity != hcl.DiagError || d.Subject == nil || !touches(*d.Subject, whole) {
			continue
		}
		within := point.ContainsOffset(d.Subject.Start.Byte) && d.Subject.End.Byte <= point.End.Byte
		if !within || (d.Subject.Start.Byte == point.Start.Byte && d.Subject.End.Byte == point.End.Byte) {
			return true
		}
	}
	return false
}

// touches reports whether the diagnostic range d lies on rng: overlapping
// it, or, as an empty range (a missing argument's), within it.
func touches(d, rng hcl.Range) bool {
	if d.Start.Byte == d.End.Byte {
		return d.Filename == rng.Filename && rng.Start.Byte <= d.Start.Byte && d.Start.Byte <= rng.End.Byte
	}
	return d.Overlaps(rng)
}

// reportedAt reports whether an error is already reported within rng.
func (c *checker) reportedAt(rng hcl.Range) bool {
	for _, d := range c.diags {
		if d.Severity == hcl.DiagError && d.Subject != nil && d.Subject.Overlaps(rng) {
			return true
		}
	}
	return c.decodeFailed(rng)
}

// listenFields finds the fields of edge.Options: the listen and tls
// blocks, the acme block, and the subject block's ipv6_prefix.
func (c *checker) listenFields(fb *fileBlock) finder {
	bodies, defs := map[string]hcl.Body{}, map[string]hcl.Range{}
	if b := fb.Listen; b != nil {
		bodies["listen"], defs["listen"] = b.Body, b.DefRange
	}
	if b := fb.TLS; b != nil {
		bodies["tls"], defs["tls"] = b.Body, b.DefRange
		if b.ACME != nil {
			bodies["tls.acme"] = b.ACME.Body
		}
	}
	if b := fb.Subject; b != nil {
		bodies["subject"] = b.Body
	}
	return finderOf(bodies, defs, c.elements)
}
