//go:build race

package proxy_test

// raceDetector is whether this test binary was built with -race, which
// multiplies the gateway's CPU per request several times over.
const raceDetector = true
