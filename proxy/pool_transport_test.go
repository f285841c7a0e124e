package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A pool's transport speaks HTTP/2 to a target that offers it over TLS:
// its own dialer must not cost the ALPN negotiation.
func TestAPoolSpeaksHTTP2ToATargetThatOffersIt(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	p, err := Pool{Name: "tls", Targets: []string{s.URL}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	tr := newPoolTransport(p).std
	t.Cleanup(tr.CloseIdleConnections)
	// The test server's certificate is trusted the way an operator's CA
	// would be: the transport's own TLS settings are left as they are.
	tr.TLSClientConfig = s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	res, err := (&http.Client{Transport: tr}).Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.ProtoMajor != 2 || res.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Fatalf("spoke %s (the target saw %s)", res.Proto, res.Header.Get("X-Proto"))
	}
}
