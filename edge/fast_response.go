package edge

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fastResponse is the fast path's http.ResponseWriter, one a connection,
// reset for each request. It frames a response as net/http's server does:
// the handler's Content-Length when it set one; for a body of unknown
// length, a Content-Length when the handler ends within pendingMax, else
// chunked with the trailers it declared; no body for HEAD, 1xx, 204 and
// 304; a sniffed Content-Type when the handler set none; Date when it set
// none; Connection: close when the connection ends after it.
type fastResponse struct {
	c      *fastConn
	req    *http.Request
	header http.Header

	status    int  // the final status; 0 before WriteHeader
	headerOut bool // the status line and the header are in c.bw
	// head is the status line and the header fields as they were at
	// WriteHeader (net/http's snapshot), without the framing ones, which
	// go out with them once the framing is decided.
	head       []byte
	connection []string // the handler's Connection values
	typed      bool     // the handler set Content-Type
	dated      bool     // the handler set Date
	hasTE      bool     // the handler set Transfer-Encoding
	declared   bool     // the handler declared trailers
	length     int64
	chunked    bool
	written    int64
	pending    []byte // the body before the header went out
	closeAfter bool
	hijacked   bool
	notify     chan bool // CloseNotify's, made on demand
}

func (w *fastResponse) reset(req *http.Request) {
	if w.header == nil {
		w.header = make(http.Header)
	} else {
		clear(w.header)
	}
	w.req, w.status, w.headerOut, w.length, w.chunked, w.written = req, 0, false, -1, false, 0
	w.pending, w.closeAfter, w.hijacked, w.notify = w.pending[:0], false, false, nil
	w.head, w.connection = w.head[:0], nil
}

func (w *fastResponse) Header() http.Header { return w.header }

func (w *fastResponse) WriteHeader(code int) {
	if w.hijacked {
		w.c.f.logf("http: response.WriteHeader on hijacked connection")
		return
	}
	if w.status != 0 {
		w.c.f.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.status = code
	h := w.header
	switch code {
	case http.StatusNotModified:
		delete(h, "Content-Type")
		delete(h, "Content-Length")
		delete(h, "Transfer-Encoding")
	case http.StatusNoContent:
		delete(h, "Transfer-Encoding")
	}
	if cl, ok := h["Content-Length"]; ok {
		if v, err := strconv.ParseInt(strings.TrimSpace(first(cl)), 10, 64); err == nil && v >= 0 && len(cl) == 1 {
			w.length = v
		} else {
			w.c.f.logf("http: invalid Content-Length of %q", first(cl))
			delete(h, "Content-Length")
		}
	}
	_, w.hasTE = h["Transfer-Encoding"]
	if w.hasTE {
		delete(h, "Content-Length")
		w.length = -1
	}
	_, w.typed = h["Content-Type"]
	_, w.dated = h["Date"]
	w.declared = len(h["Trailer"]) > 0
	w.connection = h["Connection"]
	if len(w.connection) > 0 && w.connection[0] == "close" {
		w.closeAfter = true
	}
	b := appendStatusLine(w.head[:0], code)
	for k, vv := range h {
		if k == "Transfer-Encoding" || k == "Connection" || strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		b = appendField(b, k, vv)
	}
	w.head = b
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// informational writes a 1xx at once, with the header as it is.
func (w *fastResponse) informational(code int) {
	b := appendStatusLine(w.head[:0], code)
	for k, vv := range w.header {
		if k == "Content-Length" || k == "Transfer-Encoding" {
			continue
		}
		b = appendField(b, k, vv)
	}
	w.head = append(b, "\r\n"...)
	w.c.bw.Write(w.head)
	w.c.bw.Flush()
}

// bodyAllowed reports whether a response of status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *fastResponse) Write(p []byte) (int, error) {
	if err := w.accept(len(p)); err != nil || len(p) == 0 {
		return 0, err
	}
	return w.write(p)
}

func (w *fastResponse) WriteString(s string) (int, error) {
	if err := w.accept(len(s)); err != nil || len(s) == 0 {
		return 0, err
	}
	switch {
	case w.holds(len(s)):
		w.pending = append(w.pending, s...)
		return len(s), nil
	case w.headerOut && !w.chunked && w.req.Method != http.MethodHead:
		return w.c.bw.WriteString(s)
	}
	return w.write([]byte(s))
}

// accept readies the response for n bytes of body and counts them, or
// says why it takes none.
func (w *fastResponse) accept(n int) error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if n == 0 {
		return nil
	}
	if !bodyAllowed(w.status) {
		return http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(n) > w.length {
		return http.ErrContentLength
	}
	w.written += int64(n)
	return nil
}

// write sends p, or holds it while the body's length is unknown and short.
func (w *fastResponse) write(p []byte) (int, error) {
	if w.holds(len(p)) {
		w.pending = append(w.pending, p...)
		return len(p), nil
	}
	if !w.headerOut {
		w.writeHeader(false, p)
	}
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	return w.body(p)
}

// holds reports whether n more bytes of body are held rather than sent:
// while the header is not out, the body's length is unknown and what is
// held stays within pendingMax.
func (w *fastResponse) holds(n int) bool {
	return !w.headerOut && w.length < 0 && len(w.pending)+n <= pendingMax
}

// body writes p, a chunk when chunked.
func (w *fastResponse) body(p []byte) (int, error) {
	bw := w.c.bw
	if w.chunked {
		var size [16]byte
		bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		if err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return bw.Write(p)
}

var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (w *fastResponse) ReadFrom(src io.Reader) (int64, error) {
	buf := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(buf)
	return io.CopyBuffer(writerOnly{w}, src, buf[:])
}

// writerOnly hides ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

func (w *fastResponse) Flush() {
	if w.hijacked {
		return
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerOut {
		w.writeHeader(false, nil)
	}
	w.c.bw.Flush()
}

// finish completes the response after the handler returned.
func (w *fastResponse) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerOut {
		w.writeHeader(true, nil)
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		w.trailers()
		bw.WriteString("\r\n")
	}
	if w.length >= 0 && w.written != w.length && bodyAllowed(w.status) && w.req.Method != http.MethodHead {
		// The body is short of what the header said: the client can only
		// tell from the connection's end.
		w.closeAfter = true
	}
}

// writeHeader puts the status line and the header in c.bw, with the
// framing decided now, then the body held so far. done: the handler has
// returned, so a held body is the whole of it; next is the body's next
// piece when the header goes out before it.
func (w *fastResponse) writeHeader(done bool, next []byte) {
	w.headerOut = true
	bw := w.c.bw
	allowed := bodyAllowed(w.status)
	head := w.req.Method == http.MethodHead
	length := -1
	if allowed && w.length < 0 && done && !w.hasTE && !w.declared && (!head || len(w.pending) > 0) {
		length = len(w.pending)
		w.length = int64(length)
	} else if allowed && w.length < 0 && !head {
		w.chunked = true
	}
	if w.req.Close || w.c.f.closing.Load() || asksClose(w.req.Header["Connection"]) {
		w.closeAfter = true
	}
	bw.Write(w.head)
	if !w.typed && allowed && !w.hasTE {
		sniff := w.pending
		if len(sniff) == 0 {
			sniff = next
		}
		if len(sniff) > 0 {
			bw.WriteString("Content-Type: " + http.DetectContentType(sniff) + "\r\n")
		}
	}
	if !w.dated {
		bw.WriteString("Date: ")
		bw.Write(httpDate())
		bw.WriteString("\r\n")
	}
	if length >= 0 {
		var n [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(n[:0], int64(length), 10))
		bw.WriteString("\r\n")
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter && !asksClose(w.connection) {
		bw.WriteString("Connection: close\r\n")
	} else if len(w.connection) > 0 {
		bw.Write(appendField(nil, "Connection", w.connection))
	}
	bw.WriteString("\r\n")
	if len(w.pending) > 0 && !head {
		w.body(w.pending)
	}
	w.pending = w.pending[:0]
}

// trailers writes the trailer fields: those the header declared in
// Trailer, and those set with http.TrailerPrefix.
func (w *fastResponse) trailers() {
	h, bw := w.header, w.c.bw
	for _, v := range h["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if vv, ok := h[name]; ok && name != "Trailer" {
				bw.Write(appendField(nil, name, vv))
			}
		}
	}
	for k, vv := range h {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			bw.Write(appendField(nil, name, vv))
		}
	}
}

// appendStatusLine appends HTTP/1.1's status line for code.
func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

var newlinesToSpaces = strings.NewReplacer("\r", " ", "\n", " ")

// appendField appends name's values, each on a line of its own, with CR
// and LF in a value turned into spaces as net/http does.
func appendField(b []byte, name string, values []string) []byte {
	for _, v := range values {
		if strings.ContainsAny(v, "\r\n") {
			v = newlinesToSpaces.Replace(v)
		}
		b = append(b, name...)
		b = append(b, ": "...)
		b = append(b, strings.TrimSpace(v)...)
		b = append(b, "\r\n"...)
	}
	return b
}

// The Date header's value, formatted once a second.
type dateLine struct {
	second int64
	value  []byte
}

var currentDate atomic.Pointer[dateLine]

func httpDate() []byte {
	now := time.Now()
	if d := currentDate.Load(); d != nil && d.second == now.Unix() {
		return d.value
	}
	d := &dateLine{second: now.Unix(), value: now.UTC().AppendFormat(nil, http.TimeFormat)}
	currentDate.Store(d)
	return d.value
}

func (w *fastResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	c := w.c
	c.disarmWatch()
	if w.status != 0 && !w.headerOut {
		w.writeHeader(false, nil)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, nil, err
	}
	w.hijacked = true
	c.fc.SetDeadline(time.Time{})
	if c.f.srv.ConnState != nil {
		c.f.srv.ConnState(c.fc, http.StateHijacked)
	}
	return c.fc, bufio.NewReadWriter(c.br, bufio.NewWriter(c.fc)), nil
}

// CloseNotify is http.CloseNotifier's, which proxy's capture expects of an
// HTTP/1 server's writer: true once the request's context ends.
func (w *fastResponse) CloseNotify() <-chan bool {
	if w.notify == nil {
		ch := make(chan bool, 1)
		w.notify = ch
		ctx := w.req.Context()
		go func() {
			<-ctx.Done()
			ch <- true
		}()
	}
	return w.notify
}

// SetReadDeadline and SetWriteDeadline are http.ResponseController's.
func (w *fastResponse) SetReadDeadline(t time.Time) error  { return w.c.fc.SetReadDeadline(t) }
func (w *fastResponse) SetWriteDeadline(t time.Time) error { return w.c.fc.SetWriteDeadline(t) }

// EnableFullDuplex is http.ResponseController's: a request without a body
// has nothing to read while the response is written.
func (w *fastResponse) EnableFullDuplex() error { return nil }

// asksClose reports whether a Connection field's values ask to close as
// net/http's server reads them: its first value holds "close" in any case,
// between the value's ends, spaces, tabs or commas. (The request parser's
// req.Close reads every value, by comma.)
func asksClose(values []string) bool {
	if len(values) == 0 {
		return false
	}
	v := values[0]
	const token = "close"
	for i := 0; i+len(token) <= len(v); i++ {
		if (i == 0 || tokenEdge(v[i-1])) && (i+len(token) == len(v) || tokenEdge(v[i+len(token)])) && strings.EqualFold(v[i:i+len(token)], token) {
			return true
		}
	}
	return false
}

func tokenEdge(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
