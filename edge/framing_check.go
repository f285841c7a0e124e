package edge

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// framingCheck stands in front of a public listener's handler and holds
// every HTTP/1 request to the verdict the scanner gave on its head:
//
//   - a refused request gets 400 and the connection closes; nothing of it
//     reaches next;
//   - a request the scanner did not see as the next one (none queued, or
//     another request line) is refused the same way: verdicts are bound to
//     requests, never to places in a queue;
//   - once the scanner lost track of a connection, the request being served
//     is its last: the response says Connection: close;
//   - an HTTP/1 request on a connection nobody scans is refused, so a
//     server built without the scanner fails loudly instead of serving
//     unchecked.
//
// It answers "OPTIONS *" itself, as http.Server would (the server passes it
// here, so that its verdict is taken like any other). Requests over TLS
// that the framing listener decrypted get their TLS state back.
type framingCheck struct {
	next     http.Handler
	listener string // "http" or "https", for the log
	refusals *framingRefusals
}

func (f *framingCheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	last := false
	if fc, ok := r.Context().Value(connKey{}).(*framingConn); ok {
		var refused refusal
		if refused, last = fc.take(r); refused != notRefused {
			f.refuse(w, refused)
			return
		}
		if fc.tls != nil && r.TLS == nil {
			r.TLS = fc.tls
		}
	} else if r.ProtoMajor != 2 {
		f.refuse(w, refusedOutOfStep)
		return
	}
	if last {
		cw := &closingWriter{ResponseWriter: w}
		defer cw.finish()
		w = cw
	}
	if r.Method == http.MethodOptions && r.RequestURI == "*" {
		answerOptions(w, r)
		return
	}
	f.next.ServeHTTP(w, r)
}

// answerOptions answers "OPTIONS *" as http.Server does: 200, no body, and
// at most 4 KiB of a request body read.
func answerOptions(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "0")
	if r.ContentLength != 0 {
		io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 4<<10))
	}
	w.WriteHeader(http.StatusOK)
}

var refusalBodies = func() (b [refusalCount][]byte) {
	problem := func(kind, title, detail string) []byte {
		return []byte(`{"type":"urn:edge-gateway:problem:` + kind + `","title":"` + title + `","status":400,"detail":"` + detail + `"}`)
	}
	b[refusedConflictingFraming] = problem("conflicting-framing", "Conflicting message framing", "The request has both Content-Length and Transfer-Encoding.")
	b[refusedHTTP10TransferEncoding] = problem("bad-framing", "Faulty message framing", "An HTTP/1.0 request cannot have Transfer-Encoding.")
	b[refusedObsFold] = problem("bad-framing", "Faulty message framing", "The request has a header line folded onto the previous one.")
	b[refusedOutOfStep] = problem("bad-framing", "Faulty message framing", "The connection's framing could not be followed.")
	return b
}()

func (f *framingCheck) refuse(w http.ResponseWriter, why refusal) {
	f.refusals.record(why, f.listener)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusBadRequest)
	w.Write(refusalBodies[why])
}

// framingRefusals counts refusals (gateway_framing_refusals_total{reason})
// and logs them, at most one line per reason a second (LogThrottle): a
// client can open connections as fast as it likes, and each can be
// refused once. The lines carry no client address.
type framingRefusals struct {
	counters [refusalCount]prometheus.Counter
	logger   *slog.Logger
	log      LogThrottle[refusal]
}

// newFramingRefusals registers the counter on reg when it is not nil.
func newFramingRefusals(reg prometheus.Registerer, logger *slog.Logger) *framingRefusals {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_framing_refusals_total",
		Help: "HTTP/1 requests refused for their framing, by reason; each closes its connection.",
	}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(vec)
	}
	f := &framingRefusals{logger: logger}
	for why := refusedConflictingFraming; why < refusalCount; why++ {
		f.counters[why] = vec.WithLabelValues(why.String())
	}
	return f
}

func (f *framingRefusals) record(why refusal, listener string) {
	f.counters[why].Inc()
	if log, skipped := f.log.Admit(why); log {
		f.logger.Warn("request refused for its framing; the connection closes",
			"reason", why.String(), "listener", listener, "refusals_not_logged", skipped)
	}
}

// closingWriter makes the response it writes the connection's last: it
// adds Connection: close to the final response, which tells the server to
// close after it. A 101 is left alone: the handler has taken the
// connection over.
type closingWriter struct {
	http.ResponseWriter
	wrote, hijacked bool
}

func (w *closingWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *closingWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *closingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the implicit 200 of a handler that wrote nothing, so that
// it too says Connection: close.
func (w *closingWriter) finish() {
	if !w.wrote && !w.hijacked {
		w.WriteHeader(http.StatusOK)
	}
}
