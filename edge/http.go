package edge

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// redirectToHTTPS answers every plain-HTTP request with a 308 to the same
// URL on HTTPS, keeping the method and body semantics. ACME HTTP-01
// challenges are answered by the handler in front of it
// (terminator.httpChallenge) and never reach here. httpsPort is left out of
// the Location when it is 443.
func redirectToHTTPS(httpsPort int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" || strings.ContainsAny(host, "/\\@ ") {
			http.Error(w, "bad host", http.StatusBadRequest)
			return
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		if httpsPort != 443 {
			host += ":" + strconv.Itoa(httpsPort)
		}
		target := "https://" + host + r.URL.RequestURI()
		w.Header().Set("Location", target)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusPermanentRedirect)
	})
}

// hsts adds Strict-Transport-Security to every response of next; the
// header value is built once, not per request.
func hsts(next http.Handler, maxAge time.Duration, includeSubdomains bool) http.Handler {
	if maxAge <= 0 {
		return next
	}
	v := []string{"max-age=" + strconv.FormatInt(int64(maxAge/time.Second), 10)}
	if includeSubdomains {
		v[0] += "; includeSubDomains"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Strict-Transport-Security"] = v
		next.ServeHTTP(w, r)
	})
}

// limitConnections accepts at most n connections at once; the next waits in
// the kernel's backlog until one closes. It keeps a flood of idle or slow
// connections from exhausting file descriptors and memory, which per-request
// limits cannot do: those only see requests that finished their headers.
func limitConnections(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
