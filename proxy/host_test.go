package proxy

import "testing"

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM": "example.com", "example.com.:8080": "example.com", "example.com:": "example.com",
		"[::1]:443": "::1", "[::1]": "[::1]", "10.0.0.1:80": "10.0.0.1", "a:b:c": "a:b:c",
	} {
		if got := canonicalHost(in); got != want {
			t.Errorf("canonicalHost(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalHost("example.com") }); n != 0 {
		t.Errorf("a host without a port took %v allocations", n)
	}
}
