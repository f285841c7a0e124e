package config

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// WriteDiagnostics prints each diagnostic as `file:line:column: severity:
// summary`, its detail, and the offending source line with the range
// underlined, so that both an editor and a person can find it.
func WriteDiagnostics(w io.Writer, sources map[string][]byte, diags hcl.Diagnostics) {
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		if d.Subject == nil {
			fmt.Fprintf(w, "%s: %s", sev, d.Summary)
			if d.Detail != "" {
				fmt.Fprintf(w, ": %s", d.Detail)
			}
			fmt.Fprintln(w)
			continue
		}
		r := d.Subject
		fmt.Fprintf(w, "%s:%d:%d: %s: %s\n", r.Filename, r.Start.Line, r.Start.Column, sev, d.Summary)
		if d.Detail != "" {
			fmt.Fprintf(w, "    %s\n", d.Detail)
		}
		src, ok := sources[r.Filename]
		if !ok {
			continue
		}
		lines := bytes.Split(src, []byte("\n"))
		if r.Start.Line < 1 || r.Start.Line > len(lines) {
			continue
		}
		line := strings.TrimRight(string(lines[r.Start.Line-1]), "\r")
		fmt.Fprintf(w, "%5d | %s\n", r.Start.Line, line)
		// Columns count characters, not bytes: the caret is placed by the
		// range's byte offsets within its line so that multi-byte
		// characters before or inside the range do not shift it.
		lineStart := bytes.LastIndexByte(src[:min(r.Start.Byte, len(src))], '\n') + 1
		startInLine := min(max(r.Start.Byte-lineStart, 0), len(line))
		endInLine := len(line)
		if r.End.Line == r.Start.Line {
			endInLine = min(max(r.End.Byte-lineStart, startInLine), len(line))
		}
		width := max(utf8.RuneCountInString(line[startInLine:endInLine]), 1)
		pad := strings.Map(func(c rune) rune {
			if c == '\t' {
				return '\t'
			}
			return ' '
		}, line[:startInLine])
		fmt.Fprintf(w, "      | %s%s\n", pad, strings.Repeat("^", width))
	}
}
