package edge

import (
	"net"
	"net/http"
	"strconv"
	"strings"
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
