package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// serveUpstream answers every request 200 with a small JSON body over
// keep-alive connections, and counts requests and accepted connections
// (a proxy that re-dials its upstream shows up in the second).
//
// It speaks just enough HTTP/1.1 by hand for what the harness sends
// through a proxy (requests without a body, or with a Content-Length
// one; pipelined or one at a time) instead of using net/http's server:
// that cost 20–28 µs of CPU a request here, on the core the upstream
// shares with wrk and redis-server, and filled that core before the proxy
// core under test (load core 89–95% busy for the memory gateway). A
// proxy's req/s then measured the load side as much as the proxy. This
// one answers as net/http did (the same status, headers and body, Date
// included), for about 9 µs.
func serveUpstream(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return new(upstream).serve(l)
}

type upstream struct {
	requests, conns atomic.Int64
}

// upstreamBody is every answer's body but the counters'.
const upstreamBody = `{"ok":true,"from":"bench upstream"}` + "\n"

func (u *upstream) serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		u.conns.Add(1)
		go u.serveConn(c)
	}
}

// errUnreadable: the request cannot be read to its end, so neither can the
// next one on its connection.
var errUnreadable = errors.New("unreadable request")

// upstreamRequest is what the upstream reads of a request's head.
type upstreamRequest struct {
	stats   bool  // the counters' path
	length  int64 // Content-Length; 0 without
	chunked bool
	close   bool // the connection ends after the answer
}

func (u *upstream) serveConn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 8<<10)
	w := bufio.NewWriterSize(c, 4<<10)
	// refuse answers status and ends the connection.
	refuse := func(status string) {
		w.WriteString("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		w.Flush()
	}
	var (
		scratch []byte
		date    []byte
		sec     int64
	)
	for {
		req, err := readUpstreamRequest(r)
		if err != nil {
			if errors.Is(err, errUnreadable) {
				refuse("400 Bad Request")
			}
			return
		}
		if req.chunked {
			// The harness sends none; reading one is more than this needs.
			refuse("501 Not Implemented")
			return
		}
		if req.length > 0 {
			if _, err := r.Discard(int(req.length)); err != nil {
				return
			}
		}
		if now := time.Now(); now.Unix() != sec || date == nil {
			sec, date = now.Unix(), now.UTC().AppendFormat(date[:0], http.TimeFormat)
		}
		contentType, body := "application/json", upstreamBody
		if req.stats {
			contentType, body = "text/plain; charset=utf-8", fmt.Sprintf("requests=%d conns=%d\n", u.requests.Load(), u.conns.Load())
		} else {
			u.requests.Add(1)
		}
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: ")
		w.WriteString(contentType)
		w.WriteString("\r\nContent-Length: ")
		scratch = strconv.AppendInt(scratch[:0], int64(len(body)), 10)
		w.Write(scratch)
		w.WriteString("\r\nDate: ")
		w.Write(date)
		if req.close {
			w.WriteString("\r\nConnection: close")
		}
		w.WriteString("\r\n\r\n")
		w.WriteString(body)
		// One write for the answers to what was read at once (pipelined
		// requests), none held back waiting for more.
		if req.close || r.Buffered() == 0 {
			if w.Flush() != nil || req.close {
				return
			}
		}
	}
}

// readUpstreamRequest reads a request's line and header fields. An error
// that is not errUnreadable is the connection's (it ended between
// requests, or failed).
func readUpstreamRequest(r *bufio.Reader) (upstreamRequest, error) {
	var req upstreamRequest
	line, err := readUpstreamLine(r)
	if err != nil {
		return req, err
	}
	method, rest, ok1 := bytes.Cut(line, []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 || len(target) == 0 || !bytes.HasPrefix(version, []byte("HTTP/1.")) {
		return req, errUnreadable
	}
	path, _, _ := bytes.Cut(target, []byte("?"))
	req.stats = string(path) == upstreamStatsPath
	req.close = string(version) == "HTTP/1.0"
	for {
		line, err := readUpstreamLine(r)
		if err != nil {
			return req, err
		}
		if len(line) == 0 {
			return req, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return req, errUnreadable
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 || req.length > 0 && n != req.length {
				return req, errUnreadable
			}
			req.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			req.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				req.close = true
			} else if bytes.EqualFold(value, []byte("keep-alive")) {
				req.close = false
			}
		}
	}
}

// readUpstreamLine is one line without its CRLF (or bare LF), as long as
// the reader's buffer at most.
func readUpstreamLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, errUnreadable
		}
		return nil, err
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
	return line, nil
}
