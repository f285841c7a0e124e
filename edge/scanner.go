package edge

import (
	"bytes"
	"strconv"
)

// The scanner reads an HTTP/1 request stream the way Go's server does
// (net/http's request reader, its chunked reader and net/textproto), byte
// for byte, so that it knows where each request starts and ends without
// being the parser that serves them. For each request head it hands over a
// verdict; where it cannot be sure the server frames the stream as it
// does, it stops and says so (lost), and the connection must end after the
// request being served. The rule it follows: never be the lenient one. It
// may stop where the server goes on (the connection then closes early), but
// it never goes on where the server would frame the bytes differently;
// FuzzBoundaries holds it to that.

// refusal says why a request is refused; the zero value: it is not.
type refusal uint8

const (
	notRefused refusal = iota
	// Both Content-Length and Transfer-Encoding: Go's server would drop
	// the Content-Length and read the chunked body (RFC 9112 §6.3 lets a
	// server refuse instead).
	refusedConflictingFraming
	// Transfer-Encoding on an HTTP/1.0 request: Go ignores it and reads
	// the body by Content-Length (RFC 9112 §6.1: faulty framing).
	refusedHTTP10TransferEncoding
	// A header line folded onto the previous one (RFC 9112 §5.2 lets a
	// server refuse it).
	refusedObsFold
	// A request the scanner did not follow: it lost track earlier on the
	// connection, or the server serves a request it did not scan.
	refusedOutOfStep
	refusalCount
)

// String is the refusal's metric label and log value.
func (r refusal) String() string {
	switch r {
	case refusedConflictingFraming:
		return "conflicting_framing"
	case refusedHTTP10TransferEncoding:
		return "http10_transfer_encoding"
	case refusedObsFold:
		return "obs_fold"
	case refusedOutOfStep:
		return "out_of_step"
	}
	return "none"
}

// verdict is the scanner's word on one request head.
type verdict struct {
	// startLine is the request line as sent: the handler checks that the
	// request it serves is this one.
	startLine string
	refusal   refusal
}

type scanState uint8

const (
	inHead      scanState = iota
	inBody                // Content-Length bytes left in remaining
	inChunkSize           // a chunk-size line
	inChunkData           // chunk bytes left in remaining
	inChunkCR             // the CR after chunk data
	inChunkLF             // the LF after chunk data
	inTrailer             // trailer lines up to an empty one
	lost                  // the scanner no longer follows the stream
)

const (
	// maxScanLine bounds a buffered head line: the server refuses long
	// before (max_header_bytes), and past it the scanner stops.
	maxScanLine = 1 << 20
	// maxChunkLine is the longest chunk-size line Go's chunked reader
	// takes, CRLF included (its bufio buffer).
	maxChunkLine = 4096
	// maxLeadingCRLF is how many CR or LF bytes Go's server skips before a
	// request that follows a POST.
	maxLeadingCRLF = 4
)

type scanner struct {
	state     scanState
	line      []byte
	remaining uint64 // body or chunk bytes left
	// skipCRLF is how many leading CR or LF bytes the next head may still
	// skip (after a POST, like the server).
	skipCRLF int

	// The head being read.
	startLine  []byte
	sawStart   bool
	headerSeen bool // a header line was read
	http10     bool // the version is below HTTP/1.1
	post       bool
	obsFold    bool
	upgrade    bool
	teCount    int
	teChunked  bool // the only Transfer-Encoding is "chunked"
	clCount    int
	clValue    []byte
	clMismatch bool
}

// feed scans p, the next bytes of the stream. It calls emit with each
// request head's verdict, in order, and lose once when it stops following
// the stream; emit is not called after lose.
func (s *scanner) feed(p []byte, emit func(verdict), lose func()) {
	for len(p) > 0 && s.state != lost {
		switch s.state {
		case inBody, inChunkData:
			n := uint64(len(p))
			if n > s.remaining {
				n = s.remaining
			}
			s.remaining -= n
			p = p[n:]
			if s.remaining == 0 {
				if s.state == inBody {
					s.nextHead()
				} else {
					s.state = inChunkCR
				}
			}
			continue
		case inChunkCR, inChunkLF:
			// Go wants exactly CRLF after chunk data.
			want := byte('\r')
			if s.state == inChunkLF {
				want = '\n'
			}
			if p[0] != want {
				s.lose(lose)
				return
			}
			p = p[1:]
			if s.state == inChunkCR {
				s.state = inChunkLF
			} else {
				s.state = inChunkSize
			}
			continue
		case inHead:
			if s.skipCRLF > 0 && !s.sawStart && len(s.line) == 0 {
				if p[0] == '\r' || p[0] == '\n' {
					s.skipCRLF--
					p = p[1:]
					continue
				}
				s.skipCRLF = 0
			}
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.line = append(s.line, p...)
			if len(s.line) > s.lineLimit() {
				s.lose(lose)
			}
			return
		}
		// A line whole in p is read in place; only pieces are copied.
		raw := p[:i+1]
		if len(s.line) > 0 {
			s.line = append(s.line, raw...)
			raw = s.line
		}
		p = p[i+1:]
		if len(raw) > s.lineLimit() {
			s.lose(lose)
			return
		}
		s.onLine(raw, emit, lose)
		if cap(s.line) > 64<<10 {
			s.line = nil // a long line is no reason to keep its memory
		} else {
			s.line = s.line[:0]
		}
	}
}

func (s *scanner) lineLimit() int {
	if s.state == inChunkSize {
		return maxChunkLine
	}
	return maxScanLine
}

func (s *scanner) lose(lose func()) {
	s.state = lost
	s.line, s.startLine, s.clValue = nil, nil, nil
	lose()
}

// onLine takes raw, a whole line with its LF.
func (s *scanner) onLine(raw []byte, emit func(verdict), lose func()) {
	switch s.state {
	case inChunkSize:
		// Go's chunked reader: CRLF only, no other CR, trailing spaces and
		// tabs dropped, extensions cut at the first ';', then 1 to 16 hex
		// digits and nothing else.
		if len(raw) < 2 || raw[len(raw)-2] != '\r' || bytes.IndexByte(raw, '\r') != len(raw)-2 {
			s.lose(lose)
			return
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(raw[:len(raw)-2], " \t"), []byte(";"))
		n, ok := parseChunkSize(size)
		switch {
		case !ok:
			s.lose(lose)
		case n == 0:
			s.state = inTrailer
		default:
			s.state, s.remaining = inChunkData, n
		}
		return
	}
	line := lineContent(raw)
	switch s.state {
	case inTrailer:
		if len(line) == 0 {
			s.nextHead()
		}
	case inHead:
		s.headLine(line, emit, lose)
	}
}

// lineContent is a line without its LF and one CR before it, as bufio's
// ReadLine gives it to the server.
func lineContent(raw []byte) []byte {
	line := raw[:len(raw)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line
}

func (s *scanner) headLine(line []byte, emit func(verdict), lose func()) {
	if !s.sawStart {
		major, minor, ok := requestVersion(line)
		if !ok {
			s.lose(lose) // the server refuses a request line it cannot parse
			return
		}
		s.sawStart = true
		s.startLine = append(s.startLine[:0], line...)
		s.http10 = major < 1 || major == 1 && minor < 1
		s.post = bytes.HasPrefix(line, []byte("POST "))
		return
	}
	if len(line) > 0 {
		if line[0] == ' ' || line[0] == '\t' {
			s.obsFold = true // on the first header line the server refuses it anyway
		}
		s.headerSeen = true
		s.header(line)
		return
	}
	s.endHead(emit, lose)
}

// header notes the fields that decide the framing. Names match as Go's
// canonical form does (ASCII case only); values are trimmed as
// net/textproto trims them.
func (s *scanner) header(line []byte) {
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return // the server refuses a header line without a colon
	}
	value = trimOWS(value)
	switch {
	case asciiEqualFold(name, "Content-Length"):
		if s.clCount > 0 && !bytes.Equal(s.clValue, value) {
			s.clMismatch = true
		}
		s.clCount++
		s.clValue = append(s.clValue[:0], value...)
	case asciiEqualFold(name, "Transfer-Encoding"):
		s.teCount++
		s.teChunked = asciiEqualFold(value, "chunked")
	case asciiEqualFold(name, "Upgrade"):
		s.upgrade = true
	}
}

// endHead hands over the head's verdict and moves to its body the way the
// server frames it.
func (s *scanner) endHead(emit func(verdict), lose func()) {
	v := verdict{startLine: string(s.startLine)}
	hasTE, hasCL := s.teCount > 0, s.clCount > 0
	switch {
	case s.obsFold:
		v.refusal = refusedObsFold
	case hasTE && s.http10:
		v.refusal = refusedHTTP10TransferEncoding
	case hasTE && hasCL:
		v.refusal = refusedConflictingFraming
	}
	emit(v)
	if v.refusal != notRefused {
		// The connection closes after the refusal.
		s.lose(lose)
		return
	}
	post := s.post
	switch {
	case s.upgrade:
		// Whether the connection stays HTTP/1 is up to the upstream's
		// answer, which the scanner does not see.
		s.lose(lose)
	case hasTE:
		if s.teCount != 1 || !s.teChunked {
			s.lose(lose) // the server answers 501 and closes
			return
		}
		s.resetHead(post)
		s.state = inChunkSize
	case hasCL:
		n, err := strconv.ParseUint(string(s.clValue), 10, 63)
		if err != nil || s.clMismatch {
			s.lose(lose) // the server answers 400 and closes
			return
		}
		s.resetHead(post)
		if n > 0 {
			s.state, s.remaining = inBody, n
		} else {
			s.nextHead()
		}
	default:
		s.resetHead(post)
		s.nextHead()
	}
}

// resetHead forgets the head, keeping the buffers.
func (s *scanner) resetHead(post bool) {
	*s = scanner{line: s.line, startLine: s.startLine[:0], clValue: s.clValue[:0], post: post}
}

// nextHead starts the next request once a message ended.
func (s *scanner) nextHead() {
	s.state = inHead
	if s.post {
		s.skipCRLF = maxLeadingCRLF
	}
	s.post = false
}

// atBoundary reports whether the scanner stands between two requests.
func (s *scanner) atBoundary() bool {
	return s.state == inHead && !s.sawStart && len(s.line) == 0
}

// requestVersion parses a request line as Go's server does: method, one
// space, target, one space, then a version "HTTP/x.y".
func requestVersion(line []byte) (major, minor int, ok bool) {
	_, rest, ok1 := bytes.Cut(line, []byte(" "))
	_, proto, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	switch string(proto) {
	case "HTTP/1.1":
		return 1, 1, true
	case "HTTP/1.0":
		return 1, 0, true
	}
	if len(proto) != len("HTTP/x.y") || !bytes.HasPrefix(proto, []byte("HTTP/")) || proto[6] != '.' ||
		!isDigit(proto[5]) || !isDigit(proto[7]) {
		return 0, 0, false
	}
	return int(proto[5] - '0'), int(proto[7] - '0'), true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// parseChunkSize is Go's: 1 to 16 hex digits.
func parseChunkSize(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 16 {
		return 0, false
	}
	var n uint64
	for _, b := range v {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(b)
	}
	return n, true
}

// trimOWS drops what net/textproto drops around a value.
func trimOWS(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
