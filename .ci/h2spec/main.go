// Command h2spec runs h2spec against the HTTPS listener of a gateway built
// from this tree, with a self-signed certificate made for the run, and
// fails when a case fails that expected-failures.txt does not list with a
// reason. It prints the pass and fail counts. CI runs it from .ci/run.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	gateway := flag.String("gateway", "", "the gateway binary")
	h2spec := flag.String("h2spec", "h2spec", "the h2spec binary")
	expected := flag.String("expected", ".ci/h2spec/expected-failures.txt", "the accepted failures")
	flag.Parse()
	if err := run(*gateway, *h2spec, *expected); err != nil {
		fmt.Fprintln(os.Stderr, "h2spec:", err)
		os.Exit(1)
	}
}

func run(gateway, h2spec, expectedFile string) error {
	accepted, err := readExpected(expectedFile)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "h2spec")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeCertificate(dir); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	// An upstream that reads each body whole before it answers, as a
	// backend does: a body the HTTP/2 server refuses must fail there.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upstream := upLn.Addr().String()
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "upstream\n")
	})}
	go up.Serve(upLn)
	defer up.Close()
	config := fmt.Sprintf(`listen {
  https = %q
}
tls {
  certificate {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
}
route "all" {
  path     = "/"
  upstream = "http://%s"
}
log {
  access = false
}
`, addr, upstream)
	if err := os.WriteFile(filepath.Join(dir, "gateway.hcl"), []byte(config), 0o600); err != nil {
		return err
	}
	gw := exec.Command(gateway, "-config", filepath.Join(dir, "gateway.hcl"))
	// The gateway's own log only when something fails.
	gwLog, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return err
	}
	defer gwLog.Close()
	gw.Stdout, gw.Stderr = gwLog, gwLog
	if err := gw.Start(); err != nil {
		return err
	}
	defer func() { gw.Process.Kill(); gw.Wait() }()
	if err := waitTLS(addr); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	report := filepath.Join(dir, "report.xml")
	cmd := exec.Command(h2spec, "-t", "-k", "-h", host, "-p", port, "-j", report)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return err
	}
	failed, total, err := readReport(report)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	var unexpected []string
	for _, id := range failed {
		if _, ok := accepted[id]; !ok {
			unexpected = append(unexpected, id)
		}
	}
	fmt.Printf("h2spec: %d cases, %d passed, %d failed (%d of them listed in %s)\n",
		total, total-len(failed), len(failed), len(failed)-len(unexpected), expectedFile)
	for id := range accepted {
		if !contains(failed, id) {
			fmt.Printf("h2spec: %s passes now; take it off %s\n", id, expectedFile)
		}
	}
	if len(unexpected) > 0 {
		os.Stdout.Write(out)
		if b, err := os.ReadFile(gwLog.Name()); err == nil {
			fmt.Printf("gateway log:\n%s", b)
		}
		return fmt.Errorf("unexpected failures: %s", strings.Join(unexpected, ", "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// readExpected reads "id reason" lines; # starts a comment.
func readExpected(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		id, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s: %s has no reason", path, id)
		}
		m[id] = reason
	}
	return m, sc.Err()
}

// readReport reads h2spec's JUnit report. A case's id is its suite's
// package and its place in the suite, as h2spec numbers them
// ("http2/4.2/3").
func readReport(path string) (failed []string, total int, err error) {
	var r struct {
		Suites []struct {
			Package string `xml:"package,attr"`
			Cases   []struct {
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, 0, err
	}
	for _, s := range r.Suites {
		for i, c := range s.Cases {
			total++
			if c.Failure != nil || c.Error != nil {
				failed = append(failed, fmt.Sprintf("%s/%d", s.Package, i+1))
			}
		}
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("no case in %s", path)
	}
	return failed, total, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitTLS(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway did not listen on %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writeCertificate(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}
