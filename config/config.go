package config

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/telemetry"
)

// File is a decoded, checked configuration file, in the option types of the
// packages that consume it. What a file cannot say (loggers, registries,
// the limiter backend and resolver the proxy uses) is left for the caller.
// Options a file leaves out stay zero, and each package's constructor gives
// them its default.
type File struct {
	Listen  edge.Options    // Logger is the caller's
	Limiter limiter.Options // Registerer and Logger are the caller's
	// Subject has no PseudonymKeys when the file has no pseudonym block.
	Subject  subject.Options
	Proxy    proxy.Config // Resolver and Limiter are the caller's
	Policies []*limiter.Policy
	Log      Log
	// Telemetry is the telemetry block; nil without one (no traces).
	Telemetry *telemetry.Options
}

// Log is the log block.
type Log struct {
	Level  slog.Level
	Access bool
}

// RestartNeeded reports whether f differs from old in what only a restart
// applies: the listeners, the limiter backend and telemetry. Static
// certificates and the roots of client certificates are swapped on reload
// and do not count; asking for client certificates at all does.
func (f *File) RestartNeeded(old *File) bool {
	return !reflect.DeepEqual(withoutCertificates(f.Listen), withoutCertificates(old.Listen)) ||
		!reflect.DeepEqual(f.Limiter, old.Limiter) || !reflect.DeepEqual(f.Telemetry, old.Telemetry)
}

// withoutCertificates is o without what a reload swaps; whether it has
// client roots stays (a pool of none stands for any), with its client_auth
// as edge reads it.
func withoutCertificates(o edge.Options) edge.Options {
	if o.TLS != nil {
		t := *o.TLS
		t.Certificates = nil
		if t.ClientCAs != nil {
			t.ClientCAs = &x509.CertPool{}
			if t.ClientAuth == "" {
				t.ClientAuth = edge.DefaultClientAuth
			}
		}
		o.TLS = &t
	}
	return o
}

// Problems is the error of a file that does not load: every diagnostic,
// and the sources they point into.
type Problems struct {
	Path        string
	Diagnostics hcl.Diagnostics
	Sources     map[string][]byte
}

// Error is the report `gateway validate` prints: each diagnostic with its
// source line, then the count.
func (p *Problems) Error() string {
	var b strings.Builder
	WriteDiagnostics(&b, p.Sources, p.Diagnostics)
	n := 0
	for _, d := range p.Diagnostics {
		if d.Severity == hcl.DiagError {
			n++
		}
	}
	fmt.Fprintf(&b, "%s: %d error(s)\n", p.Path, n)
	return b.String()
}

// Load reads, decodes and checks the file at path, with env() reading
// variables through env. A file with any error is refused whole: the error
// is a *Problems.
func Load(path string, env LookupEnv) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, &Problems{Path: path, Diagnostics: hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read configuration", Detail: err.Error()}}}
	}
	f, diags := Parse(path, src, env)
	if diags.HasErrors() {
		return nil, &Problems{Path: path, Diagnostics: diags, Sources: map[string][]byte{path: src}}
	}
	return f, nil
}

// Parse decodes and checks src, read from filename. Relative paths in the
// file (file(), api_keys_file, certificates) are taken from filename's
// folder. Decoding and checking are two passes: gohcl decodes every block
// into its typed shape, then one pass checks and builds the options, so no
// block's meaning depends on the order of the file.
func Parse(filename string, src []byte, env LookupEnv) (*File, hcl.Diagnostics) {
	hf, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	c := newChecker(filepath.Dir(filename), env)
	var fb fileBlock
	c.nulls(hf.Body)
	c.decoded(gohcl.DecodeBody(hf.Body, c.ctx, &fb))
	f := c.file(&fb)
	c.diags = sortDiagnostics(c.diags)
	if c.diags.HasErrors() {
		return nil, c.diags
	}
	return f, c.diags
}

func (c *checker) file(fb *fileBlock) *File {
	f := &File{}
	f.Listen = c.listen(fb.Listen)
	if fb.TLS != nil {
		f.Listen.TLS = c.tls(fb.TLS)
	}
	f.Limiter, f.Proxy = c.limiter(fb.Limiter)
	f.Subject = c.subject(fb.Subject)
	if f.Listen.TLS != nil {
		// One set of roots: the handshake asks for certificates that chain
		// to them, the client_cert source believes those that do.
		f.Subject.ClientCAs = f.Listen.TLS.ClientCAs
	}
	// One client under max_connections_per_client is what one client-IP
	// subject is.
	f.Listen.ClientIPv6Prefix = f.Subject.IPv6Prefix
	// A trusted proxy carries many clients' connections.
	f.Listen.TrustedProxies = f.Subject.TrustedProxies
	if fb.Pseudonym != nil {
		f.Subject.PseudonymKeys, f.Subject.PseudonymVersion = c.pseudonym(fb.Pseudonym)
	}
	f.Log = c.log(fb.Log)
	f.Telemetry = c.telemetry(fb.Telemetry)
	if fb.Admin != nil {
		f.Proxy.AdminToken = c.bearerToken(fb.Admin.Token, "admin")
	}

	policies := map[string]*limiter.Policy{}
	for _, pb := range fb.Policies {
		if !isName(pb.Name) {
			c.errorf(pb.NameRange, "Invalid policy name", "Policy names are letters, digits, '.', '-' and '_'.")
			continue
		}
		if _, dup := policies[pb.Name]; dup {
			c.errorf(pb.NameRange, "Duplicate policy", "A policy named %q is already defined.", pb.Name)
			continue
		}
		// A broken policy is still known by name, so routes naming it are
		// not reported a second time.
		p := c.policy(pb)
		policies[pb.Name] = p
		if p != nil {
			f.Policies = append(f.Policies, p)
		}
	}
	maxBody := int64(proxy.DefaultMaxBodyBytes)
	if fb.Listen != nil {
		maxBody = c.integer(fb.Listen.MaxBodyBytes, fb.Listen.Body, "max_body_bytes", maxBody, 0)
	}
	f.Proxy.Pools = c.upstreams(fb.Upstreams)
	f.Proxy.Routes = c.routes(fb.Routes, policies, &f.Subject, maxBody, fb.Listen != nil && fb.Listen.HTTPS != nil)
	f.Proxy.RLSRules = c.rlsRules(fb.RLSRules, policies, &f.Subject, f.Proxy.Routes)
	if fb.RLS != nil {
		f.Proxy.RLSToken = c.bearerToken(fb.RLS.Token, "rls")
	}
	if fb.Subject != nil {
		f.Proxy.InvalidTokenPolicy = c.invalidTokenPolicy(fb.Subject.JWT, policies)
	}
	if lb := fb.Listen; lb != nil {
		f.Proxy.AllowUnderscoreHeaders = or(lb.AllowUnderscoreHeaders, false)
		f.Proxy.TunnelIdleTimeout = c.optionDuration(lb.TunnelIdleTimeout, lb.Body, "tunnel_idle_timeout")
		f.Proxy.BodyReadTimeout = c.optionDuration(lb.BodyReadTimeout, lb.Body, "body_read_timeout")
	}
	// The request path's own settings are proxy.Config.Validate's.
	proxyBodies := map[string]hcl.Body{}
	if fb.Listen != nil {
		proxyBodies["listen"] = fb.Listen.Body
	}
	if fb.Limiter != nil {
		proxyBodies["limiter"] = fb.Limiter.Body
	}
	c.fields(f.Proxy.Validate(), "Invalid configuration", hcl.Range{}, finderOf(proxyBodies, nil, nil))

	// The listeners' rules are edge's.
	c.fields(f.Listen.Validate(), "Invalid listener", hcl.Range{}, c.listenFields(fb))
	if t := f.Listen.TLS; t != nil && t.ACME != nil {
		for i, d := range t.ACME.Domains {
			t.ACME.Domains[i] = strings.ToLower(d)
		}
	}
	if f.Limiter.Kind == limiter.KindRedis && fb.Pseudonym == nil {
		c.errorf(fb.Limiter.DefRange, "Redis needs a pseudonym block",
			"Gateway instances that share Redis must share pseudonym keys; add a pseudonym block with keys from env() or file().")
	}
	return f
}

func (c *checker) listen(b *listenBlock) edge.Options {
	if b == nil {
		return edge.Options{}
	}
	l := edge.Options{HTTP: or(b.HTTP, ""), HTTPS: or(b.HTTPS, ""), HTTP3: or(b.HTTP3, false), Admin: or(b.Admin, ""),
		RateLimitGRPC: or(b.RateLimitGRPC, ""), RateLimitGRPCTLS: or(b.RateLimitGRPCTLS, false)}
	if l.HTTP == "" && l.HTTPS == "" {
		c.errorf(b.DefRange, "No public listener", "listen needs http, https or both.")
	}
	// The file's 0 means none, which edge spells negative (its zero is
	// "the default").
	l.ShutdownTimeout = c.duration(b.ShutdownTimeout, b.Body, "shutdown_timeout", 0, 0)
	if b.ShutdownTimeout != nil && l.ShutdownTimeout == 0 {
		l.ShutdownTimeout = -1
	}
	// What each may be is edge.Options.Validate's. Its zero is "the
	// default"; a 0 the file writes is below the minimum, and is passed on
	// as negative for edge to refuse.
	l.ReadHeaderTimeout = c.optionDuration(b.ReadHeaderTimeout, b.Body, "read_header_timeout")
	l.IdleTimeout = c.optionDuration(b.IdleTimeout, b.Body, "idle_timeout")
	l.MaxHeaderBytes = optionInt(b.MaxHeaderBytes)
	l.MaxConnections = int(c.integer(b.MaxConnections, b.Body, "max_connections", 0, 0))
	if b.MaxConnections != nil && l.MaxConnections == 0 {
		l.MaxConnections = -1
	}
	l.MaxConnectionsPerClient = int(c.integer(b.MaxPerClient, b.Body, "max_connections_per_client", 0, 0))
	if b.MaxPerClient != nil && l.MaxConnectionsPerClient == 0 {
		l.MaxConnectionsPerClient = -1
	}
	return l
}

func (c *checker) tls(b *tlsBlock) *edge.TLSOptions {
	t := &edge.TLSOptions{
		RedirectHTTP:          or(b.RedirectHTTP, false),
		HSTSMaxAge:            c.optionDuration(b.HSTSMaxAge, b.Body, "hsts_max_age"), // edge.Options.Validate's
		HSTSIncludeSubdomains: or(b.HSTSIncludeSubdomains, false),
		ClientCAs:             c.clientCAs(b),
		ClientAuth:            or(b.ClientAuth, ""), // edge.Options.Validate's
	}
	if ab := b.ACME; ab != nil {
		acme := &edge.ACMEOptions{
			Email:   or(ab.Email, ""),
			CA:      or(ab.CA, ""),
			CARoot:  c.path(or(ab.CARoot, "")),
			Storage: c.path(or(ab.Storage, "")),
		}
		for _, it := range c.list(ab.Domains, "domains") {
			c.elements[fmt.Sprintf("tls.acme.domains[%d]", len(acme.Domains))] = it.rng
			acme.Domains = append(acme.Domains, it.value)
		}
		if has(ab.Body, "challenges") {
			items := c.list(ab.Challenges, "challenges")
			for i, it := range items {
				c.elements[fmt.Sprintf("tls.acme.challenges[%d]", i)] = it.rng
				acme.Challenges = append(acme.Challenges, it.value)
			}
			if len(items) == 0 {
				c.errorf(ab.Challenges.Range(), "No ACME challenge", "challenges needs at least one of \"http-01\" and \"tls-alpn-01\".")
			}
		}
		t.ACME = acme
	}
	for _, cb := range b.Certificates {
		cert := edge.CertificateFiles{CertFile: c.path(cb.CertFile), KeyFile: c.path(cb.KeyFile)}
		for _, f := range []struct {
			name, path string
			rng        hcl.Range
		}{{"cert_file", cert.CertFile, valueRange(cb.Body, "cert_file")}, {"key_file", cert.KeyFile, valueRange(cb.Body, "key_file")}} {
			if f.path == "" {
				continue
			}
			if _, err := os.Stat(f.path); err != nil {
				c.errorf(f.rng, "Cannot read "+f.name, "%s.", err)
			}
		}
		t.Certificates = append(t.Certificates, cert)
	}
	return t
}

// limiter checks the limiter block: the backend's options, and the
// deadline and Retry-After the request path applies to every decision.
func (c *checker) limiter(b *limiterBlock) (limiter.Options, proxy.Config) {
	var l limiter.Options
	var p proxy.Config
	if b == nil {
		return l, p
	}
	if b.Backend != nil {
		kind, err := limiter.ParseKind(*b.Backend)
		if err != nil {
			c.refusedAt(valueRange(b.Body, "backend"), err)
		}
		l.Kind = kind
	}
	// What these may be is proxy.Config.Validate's.
	p.Deadline = c.optionDuration(b.Deadline, b.Body, "deadline")
	p.FailureRetryAfter = c.optionDuration(b.FailureRetryAfter, b.Body, "failure_retry_after")
	p.MaxDelayed = optionInt(b.MaxDelayed)
	if mb := b.Memory; mb != nil {
		// What it may be is limiter.MemoryOptions.Validate's.
		l.Memory.MaxEntries = optionInt(mb.MaxEntries)
		c.fields(l.Memory.Validate(), "Invalid memory block", hcl.Range{}, finderOf(map[string]hcl.Body{"": mb.Body}, nil, nil))
	}
	if rb := b.Redis; rb != nil {
		l.Redis = c.redis(rb)
	}
	if l.Kind == limiter.KindRedis && b.Redis == nil {
		c.errorf(b.DefRange, "Missing redis block", "backend = \"redis\" needs a redis block.")
	}
	if bb := b.Breaker; bb != nil {
		// What failures, cooldown and instances may be is
		// limiter.BreakerOptions.Validate's and FallbackOptions.Validate's.
		l.Redis.Breaker = limiter.BreakerOptions{
			Disabled: !or(bb.Enabled, true),
			Failures: optionInt(bb.Failures),
			Cooldown: c.optionDuration(bb.Cooldown, bb.Body, "cooldown"),
		}
		c.fields(l.Redis.Breaker.Validate(), "Invalid breaker block", bb.DefRange, finderOf(map[string]hcl.Body{"": bb.Body}, nil, nil))
		if l.Kind != limiter.KindRedis {
			c.errorf(bb.DefRange, "Breaker without Redis", "breaker applies to the redis backend; the memory backend cannot fail.")
		}
	}
	if fb := b.Fallback; fb != nil {
		l.Fallback.Instances = optionInt(&fb.Instances)
		c.fields(l.Fallback.Validate(), "Invalid fallback block", fb.DefRange, finderOf(map[string]hcl.Body{"": fb.Body}, nil, nil))
		if l.Kind != limiter.KindRedis {
			c.errorf(fb.DefRange, "Fallback without Redis", "fallback applies to the redis backend; the memory backend is already local.")
		}
	}
	return l, p
}

func (c *checker) redis(b *redisBlock) limiter.RedisOptions {
	r := limiter.RedisOptions{KeyPrefix: or(b.KeyPrefix, "")}
	if b.Mode != nil {
		mode, err := limiter.ParseRedisMode(*b.Mode)
		if err != nil {
			c.refusedAt(valueRange(b.Body, "mode"), err)
		} else {
			r.Mode = mode
		}
	}
	// What the addresses and db may be, that master_name goes with
	// sentinel mode alone, and that tls_ca_file needs tls, is
	// limiter.RedisOptions.Validate's.
	elements := map[string]hcl.Range{"tls_ca_file": nameRange(b.Body, "tls_ca_file")}
	for _, it := range c.list(b.Addrs, "addrs") {
		elements[fmt.Sprintf("addrs[%d]", len(r.Addrs))] = it.rng
		r.Addrs = append(r.Addrs, it.value)
	}
	r.MasterName = or(b.MasterName, "")
	if has(b.Body, "master_name") {
		elements["master_name"] = nameRange(b.Body, "master_name")
	}
	r.Username = or(b.Username, "")
	if has(b.Body, "password") {
		r.Password, _ = c.secret(b.Password, "password")
	}
	r.TLS = or(b.TLS, false)
	if b.TLSCAFile != nil {
		r.TLSCAFile = c.path(*b.TLSCAFile)
		if _, err := os.Stat(r.TLSCAFile); err != nil && r.TLS {
			c.errorf(valueRange(b.Body, "tls_ca_file"), "Cannot read tls_ca_file", "%s.", err)
		}
	}
	r.DB = int(or(b.DB, 0))
	c.fields(r.Validate(), "Invalid redis block", b.DefRange, finderOf(map[string]hcl.Body{"": b.Body}, nil, elements))
	return r
}

func (c *checker) subject(b *subjectBlock) subject.Options {
	var o subject.Options
	if b == nil {
		return o
	}
	if has(b.Body, "trusted_proxies") {
		for _, it := range c.list(b.TrustedProxies, "trusted_proxies") {
			p, err := netip.ParsePrefix(it.value)
			if err != nil {
				addr, aerr := netip.ParseAddr(it.value)
				if aerr != nil {
					c.errorf(it.rng, "Invalid CIDR", "%q is not an address or a CIDR prefix such as \"10.0.0.0/8\".", it.value)
					continue
				}
				p = netip.PrefixFrom(addr, addr.BitLen())
			}
			if p.Masked() != p {
				c.errorf(it.rng, "Invalid CIDR", "%q has bits set past its prefix length; did you mean %q?", it.value, p.Masked().String())
				continue
			}
			o.TrustedProxies = append(o.TrustedProxies, p)
		}
	}
	// What the header names may be is subject.Options.Validate's. A name
	// written empty is blank for it, and empty again after: the rules
	// that ask whether a header is set (plan_header's here, a route's
	// principal source) read the file as it is.
	headers := []struct{ dst, value *string }{
		{&o.ForwardedHeader, b.ForwardedHeader}, {&o.PrincipalHeader, b.PrincipalHeader},
		{&o.APIKeyHeader, b.APIKeyHeader}, {&o.PlanHeader, b.PlanHeader},
	}
	for _, h := range headers {
		*h.dst = optionString(h.value)
	}
	// What the prefix may be is subject.Options.Validate's (and edge's,
	// for the per-client connection cap, which reports it once). Its zero
	// is the default; a 0 the file writes is passed on as negative.
	o.IPv6Prefix = optionInt(b.IPv6Prefix)
	c.fields(o.Validate(), "Invalid subject block", hcl.Range{}, finderOf(map[string]hcl.Body{"": b.Body}, nil, nil))
	for _, h := range headers {
		*h.dst = or(h.value, "")
	}
	if b.APIKeysFile != nil {
		o.KnownKeys, o.KeyPlans = c.apiKeys(valueRange(b.Body, "api_keys_file"), c.path(*b.APIKeysFile))
	}
	if b.PlanHeader != nil && (o.PrincipalHeader == "" || len(o.TrustedProxies) == 0) {
		c.errorf(valueRange(b.Body, "plan_header"), "plan_header needs a trusted principal", "The plan header gives the plan of a principal asserted by a trusted proxy; set principal_header and trusted_proxies too.")
	}
	if b.JWT != nil {
		o.JWT = c.jwt(b.JWT)
	}
	return o
}

// maxAPIKeysFileBytes bounds api_keys_file: about a million keys.
const maxAPIKeysFileBytes = 64 << 20

// apiKeys reads the known API keys: the SHA-256 of each key in hex, one a
// line, optionally followed by the key's plan; blank lines and lines
// starting with # are skipped.
func (c *checker) apiKeys(rng hcl.Range, path string) (map[subject.KeyHash]struct{}, map[subject.KeyHash]string) {
	src, err := readFile(path, maxAPIKeysFileBytes)
	if err != nil {
		c.errorf(rng, "Cannot read api_keys_file", "%s.", err)
		return nil, nil
	}
	keys := map[subject.KeyHash]struct{}{}
	var plans map[subject.KeyHash]string
	names := map[string]string{} // one copy of each plan name
	sc := bufio.NewScanner(bytes.NewReader(src))
	// No line is too long to be read: a long line is refused for what it
	// holds, and the keys after it are still read.
	sc.Buffer(nil, len(src)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		var h subject.KeyHash
		b, err := hex.DecodeString(fields[0])
		if err != nil || len(b) != len(h) {
			c.errorf(rng, "Invalid API key hash", "%s line %d is not a SHA-256 in hex (64 hex digits); store hashes, never keys (`gateway hash-key`).", path, n)
			continue
		}
		copy(h[:], b)
		switch {
		case len(fields) > 2:
			c.errorf(rng, "Invalid API key line", "%s line %d has more than a key hash and a plan name.", path, n)
			continue
		case len(fields) == 2:
			plan := fields[1]
			if !isName(plan) {
				c.errorf(rng, "Invalid plan name", "%s line %d: plan names are letters, digits, '.', '-' and '_'.", path, n)
				continue
			}
			if _, ok := names[plan]; !ok {
				names[plan] = plan
			}
			if plans == nil {
				plans = map[subject.KeyHash]string{}
			}
			plans[h] = names[plan]
		}
		keys[h] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		c.errorf(rng, "Cannot read api_keys_file", "%s: %s.", path, err)
	}
	return keys, plans
}

func (c *checker) pseudonym(b *pseudonymBlock) (map[int][]byte, int) {
	keys := map[int][]byte{}
	version := 0 // absent: the decoder reports it
	if b.Version != nil {
		version = int(*b.Version)
	}
	elements := map[string]hcl.Range{}
	labelled := map[int]bool{}
	var skip []string
	if !has(b.Body, "version") {
		skip = append(skip, "version")
	}
	for _, kb := range b.Keys {
		v, err := strconv.Atoi(kb.Version)
		if err != nil {
			c.errorf(kb.VersionRange, "Invalid key version", "Key versions are whole numbers from 1, such as key \"2\".")
			continue
		}
		if labelled[v] {
			c.errorf(kb.VersionRange, "Duplicate key version", "Key version %d is already defined.", v)
			continue
		}
		labelled[v] = true
		field := fmt.Sprintf("key.%d", v)
		elements[field], elements[field+".secret"] = kb.VersionRange, kb.Secret.Range()
		secret, ok := c.secret(kb.Secret, "secret")
		if !ok {
			// There, but reported already: whatever else of it is wrong
			// is not said again.
			skip = append(skip, field, field+".secret")
		}
		keys[v] = []byte(secret)
	}
	// What versions and secrets may be, and that the version is at least 1
	// and has a key, is subject.ValidatePseudonymKeys's.
	c.fields(subject.ValidatePseudonymKeys(keys, version), "Invalid pseudonym block", hcl.Range{}, finderOf(map[string]hcl.Body{"": b.Body}, nil, elements), skip...)
	return keys, version
}

func (c *checker) log(b *logBlock) Log {
	l := Log{Level: slog.LevelInfo, Access: true}
	if b == nil {
		return l
	}
	if b.Level != nil {
		if !slices.Contains([]string{"debug", "info", "warn", "error"}, *b.Level) || l.Level.UnmarshalText([]byte(*b.Level)) != nil {
			c.errorf(valueRange(b.Body, "level"), "Unknown log level", "level must be debug, info, warn or error.")
		}
	}
	l.Access = or(b.Access, l.Access)
	return l
}

// bearerToken reads the token of the admin or the rls block (block): a
// secret, long enough for proxy.CheckBearerToken, and not empty (an empty
// one would turn the guard off without a word).
func (c *checker) bearerToken(expr hcl.Expression, block string) string {
	token, ok := c.secret(expr, "token")
	if !ok {
		return ""
	}
	if err := proxy.CheckBearerToken(token); err != nil || token == "" {
		c.errorf(expr.Range(), strings.ToUpper(block[:1])+block[1:]+" token too short", "The %s token is %d bytes; at least %d are needed.", block, len(token), proxy.MinBearerTokenBytes)
		return ""
	}
	return token
}
