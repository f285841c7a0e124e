package config

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/telemetry"
)

// configurationDoc is the configuration reference: a section per block
// (a heading that names the block's path in code, such as
// "### `limiter.redis`"), each with one table of attribute, type,
// default and meaning.
const configurationDoc = "../docs/configuration.md"

// codeDefaults are the defaults that a package's constructor fills in
// where the loaded File leaves a field zero, by the File field that
// carries the attribute ("[]" for any element of a slice). Each is read
// from the package that owns it, never written here.
var codeDefaults = map[string]any{
	"Listen.ShutdownTimeout":              edge.DefaultShutdownTimeout,
	"Listen.ReadHeaderTimeout":            edge.DefaultReadHeaderTimeout,
	"Listen.IdleTimeout":                  edge.DefaultIdleTimeout,
	"Listen.MaxHeaderBytes":               edge.DefaultMaxHeaderBytes,
	"Listen.MaxConnections":               edge.DefaultMaxConnections,
	"Listen.MaxConnectionsPerClient":      edge.DefaultMaxPerClient,
	"Listen.ClientIPv6Prefix":             edge.DefaultClientIPv6Prefix,
	"Limiter.Memory.MaxEntries":           limiter.DefaultMemoryMaxEntries,
	"Limiter.Redis.Breaker.Failures":      limiter.DefaultBreakerFailures,
	"Limiter.Redis.Mode":                  limiter.DefaultRedisMode,
	"Limiter.Redis.KeyPrefix":             limiter.DefaultKeyPrefix,
	"Limiter.Redis.Breaker.Cooldown":      limiter.DefaultBreakerCooldown,
	"Proxy.Deadline":                      limiter.DefaultDeadline,
	"Proxy.FailureRetryAfter":             proxy.DefaultFailureRetryAfter,
	"Proxy.MaxDelayed":                    proxy.DefaultMaxDelayed,
	"Proxy.TunnelIdleTimeout":             proxy.DefaultTunnelIdleTimeout,
	"Proxy.BodyReadTimeout":               proxy.DefaultBodyReadTimeout,
	"Proxy.Pools[].ConnectTimeout":        proxy.DefaultConnectTimeout,
	"Proxy.Pools[].ResponseTimeout":       proxy.DefaultResponseTimeout,
	"Proxy.Pools[].MaxFails":              proxy.DefaultMaxFails,
	"Proxy.Pools[].FailTimeout":           proxy.DefaultFailTimeout,
	"Proxy.Pools[].MaxEjectedPercent":     proxy.DefaultMaxEjectedPercent,
	"Proxy.Pools[].Health.Interval":       proxy.DefaultHealthInterval,
	"Proxy.Pools[].Health.Timeout":        proxy.DefaultHealthTimeout,
	"Subject.ForwardedHeader":             subject.DefaultForwardedHeader,
	"Subject.APIKeyHeader":                subject.DefaultAPIKeyHeader,
	"Subject.IPv6Prefix":                  subject.DefaultIPv6Prefix,
	"Listen.TLS.ClientAuth":               edge.DefaultClientAuth,
	"Subject.JWT.Header":                  subject.DefaultJWTHeader,
	"Subject.JWT.Claim":                   subject.DefaultJWTClaim,
	"Subject.JWT.MaxTokenBytes":           subject.DefaultMaxTokenBytes,
	"Policies[].CleanupGrace":             limiter.DefaultCleanupGrace,
	"Policies[].MaxClockRegression":       limiter.DefaultMaxClockRegression,
	"Policies[].Dedup.TTL":                limiter.DefaultDedup.TTL,
	"Policies[].Dedup.MaxEntries":         limiter.DefaultDedup.MaxEntries,
	"Policies[].Dedup.MaxBytes":           limiter.DefaultDedup.MaxBytes,
	"Policies[].Dedup.Enabled":            limiter.DefaultDedup.Enabled,
	"Proxy.Routes[].MaxBodyBytes":         proxy.DefaultMaxBodyBytes,
	"Telemetry.ServiceName":               telemetry.DefaultServiceName,
	"Telemetry.SampleRatio":               ptr(telemetry.DefaultSampleRatio), // nil when left out
	"Proxy.Pools[].Overload.QueueTimeout": overload.DefaultQueueTimeout,
}

func ptr[T any](v T) *T { return &v }

// defaultContexts are files in which a block's attributes take effect:
// the block with what it requires, and what it depends on. "@@" marks
// where an attribute goes. A block not listed here is tried as nested
// empty blocks beside docRoute.
var defaultContexts = map[string]string{
	"listen": `listen {
  http = ":8080"
  @@
}
` + docRoute,
	"tls": `listen {
  https = ":8443"
}
tls {
  certificate {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
  @@
}
` + docRoute,
	"tls.client_auth": `listen {
  https = ":8443"
}
tls {
  certificate {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
  client_ca_file = "ca.pem"
  @@
}
` + docRoute,
	"route.client_cert_identity": `listen {
  https = ":8443"
}
tls {
  certificate {
    cert_file = "cert.pem"
    key_file  = "key.pem"
  }
  client_ca_file = "ca.pem"
}
route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
  subject  = ["client_cert"]
  @@
}
`,
	"tls.acme": `listen {
  http  = ":8080"
  https = ":8443"
}
tls {
  acme {
    domains = ["example.com"]
    @@
  }
}
` + docRoute,
	"limiter.redis": docRedis(`@@`, ``),
	"limiter.breaker": docRedis(``, `breaker {
    @@
  }`),
	"subject.jwt": `subject {
  jwt {
    jwks_url   = "https://idp.example/jwks.json"
    issuer     = "https://idp.example/"
    audience   = ["api"]
    algorithms = ["RS256"]
    @@
  }
}
` + docRoute,
	"telemetry": `telemetry {
  otlp_endpoint = "http://127.0.0.1:4318"
  @@
}
` + docRoute,
	"policy": `policy "p" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
  @@
}
` + docRoute,
	// lease_ttl belongs to concurrency policies only.
	"policy.lease_ttl": `policy "p" {
  algorithm = "concurrency"
  limit     = 10
  @@
}
` + docRoute,
	"policy.dedup": `policy "p" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
  dedup {
    @@
  }
}
` + docRoute,
	"upstream": `upstream "u" {
  targets = ["http://127.0.0.1:1"]
  @@
}
` + docRoute,
	"upstream.overload": `upstream "u" {
  targets = ["http://127.0.0.1:1"]
  overload {
    max_in_flight = 8
    @@
  }
}
` + docRoute,
	"upstream.health": `upstream "u" {
  targets = ["http://127.0.0.1:1"]
  health {
    path = "/healthz"
    @@
  }
}
` + docRoute,
	// Every source a route's default list names, configured, so that the
	// list written out loads; a policy, so that cost means something.
	"route": `subject {
  trusted_proxies  = ["10.0.0.0/8"]
  principal_header = "X-User"
  api_keys_file    = "keys.txt"
}
policy "p" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
  max_cost  = 5
}
route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
  policy   = "p"
  @@
}
`,
}

// docRoute gives attributes that reach routes (listen.max_body_bytes)
// something to change.
const docRoute = `route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
}
`

func docRedis(redis, limiterBody string) string {
	return `limiter {
  backend = "redis"
  redis {
    addrs = ["127.0.0.1:6379"]
    ` + redis + `
  }
  ` + limiterBody + `
}
pseudonym {
  version = 1
  key "1" { secret = env("DOC_TEST_SECRET") }
}
` + docRoute
}

// TestConfigurationDoc holds docs/configuration.md to the code: every
// block and attribute the schema decodes has its section and row (and
// nothing else has), each type is one the schema's field can hold, an
// attribute the schema requires says "required", and each default written
// as a value is what the gateway does when the attribute is left out.
//
// A default is checked by loading a file without the attribute and the
// same file with the attribute set to the documented value. The two must
// load the same, except for fields the file leaves zero, which must then
// hold the exported default of the package whose constructor fills them
// in (codeDefaults). A third load with another value must differ, so the
// check cannot pass because the attribute had no effect.
func TestConfigurationDoc(t *testing.T) {
	doc := readConfigurationDoc(t)
	schema := map[string]map[string]schemaAttr{}
	schemaBlocks(reflect.TypeOf(fileBlock{}), "", schema)

	for _, block := range sortedKeys(schema) {
		section, ok := doc[block]
		if !ok {
			t.Errorf("%s: no section for block %q (a heading naming `%s`)", configurationDoc, block, block)
			continue
		}
		for _, name := range sortedKeys(schema[block]) {
			a, ok := section.attrs[name]
			if !ok {
				t.Errorf("%s:%d: block %q has no row for attribute %q, which the schema decodes", configurationDoc, section.line, block, name)
				continue
			}
			checkDocType(t, block, a, schema[block][name])
		}
		for _, name := range sortedKeys(section.attrs) {
			if _, ok := schema[block][name]; !ok {
				t.Errorf("%s:%d: %s.%s is not an attribute the schema decodes", configurationDoc, section.attrs[name].line, block, name)
			}
		}
	}
	for _, block := range sortedKeys(doc) {
		if _, ok := schema[block]; !ok {
			t.Errorf("%s:%d: section for %q, a block the schema does not have", configurationDoc, doc[block].line, block)
		}
	}

	for _, block := range sortedKeys(doc) {
		for _, name := range sortedKeys(doc[block].attrs) {
			a := doc[block].attrs[name]
			if _, ok := schema[block][name]; !ok {
				continue
			}
			if value, ok := literalDefault(t, block, a); ok {
				t.Run(block+"."+name, func(t *testing.T) { checkDocDefault(t, block, a, value) })
			}
		}
	}
}

type docSection struct {
	line  int
	attrs map[string]docAttr
}

type docAttr struct {
	name, typ, def string
	line           int
}

var (
	docHeading   = regexp.MustCompile("^#{2,4} (.*)$")
	docCodeSpan  = regexp.MustCompile("`([^`]*)`")
	docBlockPath = regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)*`)
)

// readConfigurationDoc reads the sections of the reference, by block path.
func readConfigurationDoc(t *testing.T) map[string]*docSection {
	t.Helper()
	f, err := os.Open(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := map[string]*docSection{}
	var current []*docSection
	sc := bufio.NewScanner(f)
	inCode := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if m := docHeading.FindStringSubmatch(line); m != nil {
			current = nil
			for _, span := range docCodeSpan.FindAllStringSubmatch(m[1], -1) {
				path := docBlockPath.FindString(span[1])
				if path == "" {
					continue
				}
				if _, dup := doc[path]; dup {
					t.Errorf("%s:%d: a second section for %q", configurationDoc, n, path)
				}
				s := &docSection{line: n, attrs: map[string]docAttr{}}
				doc[path] = s
				current = append(current, s)
			}
			continue
		}
		if !strings.HasPrefix(line, "|") || current == nil {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case cells[0] == "attribute":
			if want := []string{"attribute", "type", "default", "meaning"}; !slices.Equal(cells, want) {
				t.Errorf("%s:%d: a block's table has the columns %q, want %q", configurationDoc, n, cells, want)
			}
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		case len(cells) < 4:
			t.Errorf("%s:%d: a row of %d cells, want attribute, type, default and meaning", configurationDoc, n, len(cells))
			continue
		}
		m := docCodeSpan.FindStringSubmatch(cells[0])
		if m == nil || m[0] != cells[0] {
			t.Errorf("%s:%d: the attribute cell %q is not one name in code", configurationDoc, n, cells[0])
			continue
		}
		a := docAttr{name: m[1], typ: cells[1], def: cells[2], line: n}
		for _, s := range current {
			if _, dup := s.attrs[a.name]; dup {
				t.Errorf("%s:%d: a second row for %q", configurationDoc, n, a.name)
			}
			s.attrs[a.name] = a
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return doc
}

type schemaAttr struct {
	goType   reflect.Type
	required bool
}

// schemaBlocks collects the blocks and attributes gohcl decodes from the
// hcl tags of t, the block at path.
func schemaBlocks(t reflect.Type, path string, out map[string]map[string]schemaAttr) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("hcl")
		if !ok {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		switch kind {
		case "block":
			child := name
			if path != "" {
				child = path + "." + name
			}
			out[child] = map[string]schemaAttr{}
			et := f.Type
			for et.Kind() == reflect.Pointer || et.Kind() == reflect.Slice {
				et = et.Elem()
			}
			schemaBlocks(et, child, out)
		case "", "optional":
			out[path][name] = schemaAttr{goType: f.Type, required: kind == ""}
		}
	}
}

// docTypes are the types the reference may name; see its "General rules".
var docTypes = []string{"string", "duration", "number", "bool", "list(string)", "list(number)", "map", "secret"}

func checkDocType(t *testing.T, block string, a docAttr, s schemaAttr) {
	t.Helper()
	where := fmt.Sprintf("%s:%d: %s.%s", configurationDoc, a.line, block, a.name)
	if !slices.Contains(docTypes, a.typ) {
		t.Errorf("%s: type %q is none of %q", where, a.typ, docTypes)
		return
	}
	if s.required && !strings.HasPrefix(a.def, "required") {
		t.Errorf("%s: the schema requires it, but its default says %q, not \"required\"", where, a.def)
	}
	gt := s.goType
	for gt.Kind() == reflect.Pointer {
		gt = gt.Elem()
	}
	var fits []string
	switch {
	case gt == reflect.TypeFor[hcl.Attribute]():
		return // decoded later, in whatever type the checker asks for
	case gt == reflect.TypeFor[hcl.Expression]():
		fits = []string{"list(string)", "list(number)", "map", "secret"}
	case gt.Kind() == reflect.String:
		fits = []string{"string", "duration"}
	case gt.Kind() == reflect.Slice:
		fits = []string{"list(string)", "list(number)"}
	case gt.Kind() == reflect.Bool:
		fits = []string{"bool"}
	case gt.Kind() >= reflect.Int && gt.Kind() <= reflect.Int64:
		fits = []string{"number"}
	default:
		return
	}
	if !slices.Contains(fits, a.typ) {
		t.Errorf("%s: type %q, but the schema decodes a %s (one of %q)", where, a.typ, gt, fits)
	}
}

// literalDefault is the default cell's value when the cell is one HCL
// value in code, such as `"15s"`, `10000` or `["a", "b"]`. Any other cell
// (none, required, prose) is not checked.
func literalDefault(t *testing.T, block string, a docAttr) (string, bool) {
	t.Helper()
	m := docCodeSpan.FindStringSubmatch(a.def)
	if m == nil || m[0] != a.def {
		return "", false
	}
	expr, diags := hclsyntax.ParseExpression([]byte(m[1]), "default", hcl.InitialPos)
	if !diags.HasErrors() && len(expr.Variables()) == 0 {
		if _, diags = expr.Value(nil); !diags.HasErrors() {
			return m[1], true
		}
	}
	t.Errorf("%s:%d: %s.%s: the default `%s` is in code but is no HCL value; write a value, or prose without code", configurationDoc, a.line, block, a.name, m[1])
	return "", false
}

// checkDocDefault loads the block's context without the attribute, with
// it set to value, and with it set to another value.
func checkDocDefault(t *testing.T, block string, a docAttr, value string) {
	dir := docFolder(t)
	without := docLoad(t, dir, block, a.name, "")
	if without == nil {
		t.Fatalf("the file for block %s does not load without %s; fix defaultContexts in %s", block, a.name, "config/doc_test.go")
	}
	with := docLoad(t, dir, block, a.name, a.name+" = "+value)
	if with == nil {
		t.Fatalf("%s:%d: %s = %s, the documented default, does not load", configurationDoc, a.line, a.name, value)
	}
	for _, d := range docDiff(reflect.ValueOf(*without), reflect.ValueOf(*with), "") {
		if !d.without.IsZero() {
			t.Errorf("%s:%d: the documented default %s = %s is not the code's: %s is %s without it, %s with it",
				configurationDoc, a.line, a.name, value, d.path, show(d.without), show(d.with))
			continue
		}
		def, ok := codeDefaults[d.path]
		if !ok || def == nil {
			t.Errorf("%s:%d: %s = %s: the loaded %s is %s without it and %s with it, so a package's constructor fills it in; "+
				"add that package's exported default for %s to codeDefaults in config/doc_test.go",
				configurationDoc, a.line, a.name, value, d.path, show(d.without), show(d.with), d.path)
			continue
		}
		if !sameValue(d.with.Interface(), def) {
			t.Errorf("%s:%d: the documented default %s = %s gives %s = %s, but the code's default is %s",
				configurationDoc, a.line, a.name, value, d.path, show(d.with), show(reflect.ValueOf(def)))
		}
	}
	if other, ok := otherValue(value); ok {
		if changed := docLoad(t, dir, block, a.name, a.name+" = "+other); changed != nil && reflect.DeepEqual(*changed, *without) {
			t.Errorf("%s = %s loads the same as leaving it out, so this check sees nothing; fix defaultContexts for %s in config/doc_test.go", a.name, other, block)
		}
	}
}

// docFolder is a folder with the files the contexts name.
func docFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"cert.pem": "", "key.pem": "",
		"keys.txt": strings.Repeat("0", 64) + "\n",
		"ca.pem":   docCA(t),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// docCA is a self-signed CA certificate in PEM, for client_ca_file.
func docCA(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "doc CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// docLoad parses the context of block with attr in place of its marker,
// as a file in dir. nil when it has errors.
func docLoad(t *testing.T, dir, block, name, attr string) *File {
	t.Helper()
	src, ok := defaultContexts[block+"."+name] // an attribute's own context
	if !ok {
		src, ok = defaultContexts[block]
	}
	if !ok {
		parts := strings.Split(block, ".")
		src = strings.Join(parts, " {\n") + " {\n@@\n" + strings.Repeat("}\n", len(parts)) + docRoute
	}
	src = strings.Replace(src, "@@", attr, 1)
	env := func(string) (string, bool) { return strings.Repeat("s", 32), true }
	f, diags := Parse(filepath.Join(dir, "gateway.hcl"), []byte(src), env)
	if diags.HasErrors() {
		t.Logf("%s\n%s", src, diags.Error())
		return nil
	}
	return f
}

type docDifference struct {
	path          string
	without, with reflect.Value
}

// docDiff lists the fields where a and b differ, each by its path from
// File ("[]" for any element of a slice). A struct with unexported fields,
// a map, or a slice whose length differs is one field.
func docDiff(a, b reflect.Value, path string) []docDifference {
	if reflect.DeepEqual(a.Interface(), b.Interface()) {
		return nil
	}
	// A value that says itself when it equals another (an x509.CertPool
	// read from the same file twice).
	if eq := a.MethodByName("Equal"); eq.IsValid() && eq.Type().NumIn() == 1 && eq.Type().In(0) == a.Type() && eq.Type().NumOut() == 1 {
		if eq.Call([]reflect.Value{b})[0].Bool() {
			return nil
		}
	}
	switch a.Kind() {
	case reflect.Pointer:
		if !a.IsNil() && !b.IsNil() {
			return docDiff(a.Elem(), b.Elem(), path)
		}
	case reflect.Slice:
		if a.Len() == b.Len() {
			var out []docDifference
			for i := range a.Len() {
				out = append(out, docDiff(a.Index(i), b.Index(i), path+"[]")...)
			}
			return out
		}
	case reflect.Struct:
		exported := true
		for i := range a.NumField() {
			exported = exported && a.Type().Field(i).IsExported()
		}
		if exported {
			var out []docDifference
			for i := range a.NumField() {
				name := a.Type().Field(i).Name
				if path != "" {
					name = path + "." + name
				}
				out = append(out, docDiff(a.Field(i), b.Field(i), name)...)
			}
			return out
		}
	}
	return []docDifference{{path, a, b}}
}

// show is v for a message: strings quoted, so that an empty one shows.
func show(v reflect.Value) string {
	if v.Kind() == reflect.String {
		return strconv.Quote(v.String())
	}
	return fmt.Sprint(v)
}

// sameValue compares a loaded value with a package's default, whole
// numbers by value whatever their integer type.
func sameValue(got, want any) bool {
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	isInt := func(v reflect.Value) bool { return v.Kind() >= reflect.Int && v.Kind() <= reflect.Int64 }
	if isInt(g) && isInt(w) {
		return g.Int() == w.Int()
	}
	return reflect.DeepEqual(got, want)
}

// otherValue is a value of the same kind as the HCL literal value that is
// not it, for numbers, bools and durations; false for anything else.
func otherValue(value string) (string, bool) {
	switch value {
	case "true":
		return "false", true
	case "false":
		return "true", true
	}
	if n, err := strconv.ParseInt(value, 10, 64); err == nil {
		return strconv.FormatInt(n+1, 10), true
	}
	if s, err := strconv.Unquote(value); err == nil {
		if d, err := time.ParseDuration(s); err == nil {
			return strconv.Quote((d + time.Second).String()), true
		}
	}
	return "", false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
