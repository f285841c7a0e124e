package config

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// File is a decoded, validated configuration file.
type File struct {
	Listen    Listen
	TLS       *TLS // nil without a tls block
	Limiter   Limiter
	Subject   subject.Options // Pseudonymizer is left for the caller to build
	Pseudonym *Pseudonym      // nil without a pseudonym block
	Policies  []*limiter.Policy
	Routes    []proxy.Route
	Log       Log
}

// Listen is the listen block.
type Listen struct {
	HTTP, HTTPS, Admin string
	ShutdownTimeout    time.Duration
	ReadHeaderTimeout  time.Duration
	IdleTimeout        time.Duration
	MaxHeaderBytes     int
	MaxConnections     int   // per public listener; 0 is no cap
	MaxBodyBytes       int64 // default for routes that set none
}

// TLS is the tls block; the HTTPS listener consumes it.
type TLS struct {
	RedirectHTTP          bool
	HSTSMaxAge            time.Duration // 0: no Strict-Transport-Security
	HSTSIncludeSubdomains bool
	ACME                  *ACME
	Certificates          []Certificate
}

type ACME struct {
	Domains    []string
	Challenges []string // "http-01", "tls-alpn-01"; empty means both
	Email      string
	CA         string
	CARoot     string
	Storage    string
}

type Certificate struct {
	CertFile, KeyFile string
}

// Limiter is the limiter block.
type Limiter struct {
	Backend           string // "memory" or "redis"
	Deadline          time.Duration
	FailureRetryAfter time.Duration
	MemoryMaxEntries  int
	Redis             *Redis
}

type Redis struct {
	Mode       string // standalone, cluster, sentinel
	Addrs      []string
	MasterName string
	Username   string
	Password   string
	TLS        bool
	TLSCAFile  string // roots for the server's certificate; empty: the system's
	KeyPrefix  string
	DB         int
}

// Pseudonym is the pseudonym block: the active version and every key.
type Pseudonym struct {
	Version int
	Keys    map[int][]byte
}

// Log is the log block.
type Log struct {
	Level  string // debug, info, warn, error
	Access bool
}

// Load reads, decodes and validates the file at path. When the diagnostics
// hold an error the File is nil.
func Load(path string) (*File, hcl.Diagnostics, map[string][]byte) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read configuration", Detail: err.Error()}}, nil
	}
	f, diags := Parse(path, src)
	return f, diags, map[string][]byte{path: src}
}

// Parse decodes and validates src, read from filename. Relative paths in the
// file (file(), api_keys_file, certificates) are taken from filename's folder.
func Parse(filename string, src []byte) (*File, hcl.Diagnostics) {
	parser := hclparse.NewParser()
	hf, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	d := newDecoder(filepath.Dir(filename))
	f := d.file(hf.Body)
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	return f, d.diags
}

var topSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "listen"}, {Type: "tls"}, {Type: "limiter"}, {Type: "subject"},
	{Type: "pseudonym"}, {Type: "log"},
	{Type: "policy", LabelNames: []string{"name"}},
	{Type: "route", LabelNames: []string{"operation_id"}},
}}

func (d *decoder) file(body hcl.Body) *File {
	c := d.content(body, topSchema)
	f := &File{}
	f.Listen = d.listen(d.single(c.Blocks, "listen"))
	if b := d.single(c.Blocks, "tls"); b != nil {
		f.TLS = d.tls(b)
	}
	f.Limiter = d.limiter(d.single(c.Blocks, "limiter"))
	f.Subject = d.subject(d.single(c.Blocks, "subject"))
	if b := d.single(c.Blocks, "pseudonym"); b != nil {
		f.Pseudonym = d.pseudonym(b)
	}
	f.Log = d.log(d.single(c.Blocks, "log"))

	policies := map[string]*limiter.Policy{}
	for _, b := range c.Blocks.OfType("policy") {
		name := b.Labels[0]
		if !isName(name) {
			d.errorf(b.LabelRanges[0], "Invalid policy name", "Policy names are letters, digits, '.', '-' and '_'.")
			continue
		}
		if _, dup := policies[name]; dup {
			d.errorf(b.LabelRanges[0], "Duplicate policy", "A policy named %q is already defined.", name)
			continue
		}
		// A broken policy is still known by name, so routes naming it are
		// not reported a second time.
		p := d.policy(b)
		policies[name] = p
		if p != nil {
			f.Policies = append(f.Policies, p)
		}
	}
	f.Routes = d.routes(c.Blocks.OfType("route"), policies, &f.Subject)

	if f.Listen.HTTPS != "" && f.TLS == nil {
		d.errorf(d.listenRange, "HTTPS without TLS", "listen.https needs a tls block with acme or certificate.")
	}
	if f.TLS != nil && f.Listen.HTTPS == "" {
		d.errorf(d.tlsRange, "TLS without HTTPS", "A tls block needs listen.https.")
	}
	if f.Limiter.Backend == "redis" && f.Pseudonym == nil {
		d.errorf(d.limiterRange, "Redis needs a pseudonym block",
			"Gateway instances that share Redis must share pseudonym keys; add a pseudonym block with keys from env() or file().")
	}
	return f
}

var listenSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "http"}, {Name: "https"}, {Name: "admin"}, {Name: "shutdown_timeout"},
	{Name: "read_header_timeout"}, {Name: "idle_timeout"}, {Name: "max_header_bytes"},
	{Name: "max_connections"}, {Name: "max_body_bytes"},
}}

func (d *decoder) listen(b *hcl.Block) Listen {
	l := Listen{HTTP: ":8080", ShutdownTimeout: 15 * time.Second, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10, MaxConnections: 10000, MaxBodyBytes: 10 << 20}
	d.maxBodyBytes = l.MaxBodyBytes
	if b == nil {
		return l
	}
	d.listenRange = b.DefRange
	a := d.content(b.Body, listenSchema).Attributes
	l.HTTP = d.str(a, "http", "")
	l.HTTPS = d.str(a, "https", "")
	l.Admin = d.str(a, "admin", "")
	for _, name := range []string{"http", "https", "admin"} {
		if attr, ok := a[name]; ok {
			if addr := d.str(a, name, ""); addr != "" && !validListenAddr(addr) {
				d.errorf(attr.Expr.Range(), "Invalid listen address", "%s must be host:port, such as \":8080\" or \"127.0.0.1:9901\".", name)
			}
		}
	}
	if l.HTTP == "" && l.HTTPS == "" {
		d.errorf(b.DefRange, "No public listener", "listen needs http, https or both.")
	}
	l.ShutdownTimeout = d.duration(a, "shutdown_timeout", l.ShutdownTimeout, 0)
	l.ReadHeaderTimeout = d.duration(a, "read_header_timeout", l.ReadHeaderTimeout, time.Millisecond)
	l.IdleTimeout = d.duration(a, "idle_timeout", l.IdleTimeout, time.Millisecond)
	l.MaxHeaderBytes = int(d.integer(a, "max_header_bytes", int64(l.MaxHeaderBytes), 1024))
	l.MaxConnections = int(d.integer(a, "max_connections", int64(l.MaxConnections), 0))
	l.MaxBodyBytes = d.integer(a, "max_body_bytes", l.MaxBodyBytes, 0)
	d.maxBodyBytes = l.MaxBodyBytes
	return l
}

func validListenAddr(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return false
	}
	port, err := strconv.Atoi(s[i+1:])
	return err == nil && port >= 0 && port <= 65535
}

var tlsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "redirect_http"}, {Name: "hsts_max_age"}, {Name: "hsts_include_subdomains"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "acme"}, {Type: "certificate"}},
}

var acmeSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "domains", Required: true}, {Name: "email"}, {Name: "ca"}, {Name: "ca_root"}, {Name: "storage"},
	{Name: "challenges"},
}}

var certificateSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "cert_file", Required: true}, {Name: "key_file", Required: true},
}}

func (d *decoder) tls(b *hcl.Block) *TLS {
	d.tlsRange = b.DefRange
	c := d.content(b.Body, tlsSchema)
	t := &TLS{
		RedirectHTTP:          d.boolean(c.Attributes, "redirect_http", false),
		HSTSMaxAge:            d.duration(c.Attributes, "hsts_max_age", 0, time.Second),
		HSTSIncludeSubdomains: d.boolean(c.Attributes, "hsts_include_subdomains", false),
	}
	if ab := d.single(c.Blocks, "acme"); ab != nil {
		a := d.content(ab.Body, acmeSchema).Attributes
		acme := &ACME{
			Email:   d.str(a, "email", ""),
			CA:      d.str(a, "ca", ""),
			CARoot:  d.path(d.str(a, "ca_root", "")),
			Storage: d.path(d.str(a, "storage", "")),
		}
		items, _ := d.list(a, "domains")
		for _, it := range items {
			if it.value == "" || strings.ContainsAny(it.value, " /:*") {
				d.errorf(it.rng, "Invalid domain", "%q is not a domain name the gateway can get a certificate for.", it.value)
				continue
			}
			acme.Domains = append(acme.Domains, strings.ToLower(it.value))
		}
		if attr, ok := a["domains"]; ok && len(items) == 0 {
			d.errorf(attr.Expr.Range(), "No domains", "acme.domains needs at least one domain.")
		}
		if items, ok := d.list(a, "challenges"); ok {
			for _, it := range items {
				if it.value != "http-01" && it.value != "tls-alpn-01" {
					d.errorf(it.rng, "Unknown ACME challenge", "Challenges are \"http-01\" and \"tls-alpn-01\", not %q.", it.value)
					continue
				}
				acme.Challenges = append(acme.Challenges, it.value)
			}
			if len(items) == 0 {
				d.errorf(a["challenges"].Expr.Range(), "No ACME challenge", "challenges needs at least one of \"http-01\" and \"tls-alpn-01\".")
			}
		}
		if attr, ok := a["ca"]; ok {
			if u, err := url.Parse(acme.CA); err != nil || u.Scheme != "https" || u.Host == "" {
				d.errorf(attr.Expr.Range(), "Invalid ACME directory", "acme.ca must be an https:// URL.")
			}
		}
		t.ACME = acme
	}
	for _, cb := range c.Blocks.OfType("certificate") {
		a := d.content(cb.Body, certificateSchema).Attributes
		cert := Certificate{CertFile: d.path(d.str(a, "cert_file", "")), KeyFile: d.path(d.str(a, "key_file", ""))}
		for name, p := range map[string]string{"cert_file": cert.CertFile, "key_file": cert.KeyFile} {
			if attr, ok := a[name]; ok && p != "" {
				if _, err := os.Stat(p); err != nil {
					d.errorf(attr.Expr.Range(), "Cannot read "+name, "%s.", err)
				}
			}
		}
		t.Certificates = append(t.Certificates, cert)
	}
	if t.ACME == nil && len(t.Certificates) == 0 {
		d.errorf(b.DefRange, "No certificate source", "tls needs an acme block, one or more certificate blocks, or both.")
	}
	return t
}

var limiterSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "backend"}, {Name: "deadline"}, {Name: "failure_retry_after"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "redis"}, {Type: "memory"}},
}

var redisSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "mode"}, {Name: "addrs", Required: true}, {Name: "master_name"}, {Name: "username"},
	{Name: "password"}, {Name: "tls"}, {Name: "tls_ca_file"}, {Name: "key_prefix"}, {Name: "db"},
}}

var memorySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "max_entries"}}}

func (d *decoder) limiter(b *hcl.Block) Limiter {
	l := Limiter{Backend: "memory", Deadline: limiter.DefaultDeadline, FailureRetryAfter: time.Second, MemoryMaxEntries: 1_000_000}
	if b == nil {
		return l
	}
	d.limiterRange = b.DefRange
	c := d.content(b.Body, limiterSchema)
	a := c.Attributes
	l.Backend = d.str(a, "backend", l.Backend)
	if attr, ok := a["backend"]; ok && l.Backend != "memory" && l.Backend != "redis" {
		d.errorf(attr.Expr.Range(), "Unknown limiter backend", "backend must be \"memory\" or \"redis\", not %q.", l.Backend)
	}
	l.Deadline = d.duration(a, "deadline", l.Deadline, time.Millisecond)
	l.FailureRetryAfter = d.duration(a, "failure_retry_after", l.FailureRetryAfter, time.Second)
	if mb := d.single(c.Blocks, "memory"); mb != nil {
		ma := d.content(mb.Body, memorySchema).Attributes
		l.MemoryMaxEntries = int(d.integer(ma, "max_entries", int64(l.MemoryMaxEntries), 64))
	}
	if rb := d.single(c.Blocks, "redis"); rb != nil {
		ra := d.content(rb.Body, redisSchema).Attributes
		r := &Redis{Mode: d.str(ra, "mode", "standalone"), KeyPrefix: d.str(ra, "key_prefix", "rl:")}
		if attr, ok := ra["mode"]; ok && !slices.Contains([]string{"standalone", "cluster", "sentinel"}, r.Mode) {
			d.errorf(attr.Expr.Range(), "Unknown redis mode", "mode must be standalone, cluster or sentinel, not %q.", r.Mode)
		}
		items, _ := d.list(ra, "addrs")
		for _, it := range items {
			if !validListenAddr(it.value) || strings.HasPrefix(it.value, ":") {
				d.errorf(it.rng, "Invalid redis address", "%q must be host:port.", it.value)
				continue
			}
			r.Addrs = append(r.Addrs, it.value)
		}
		if attr, ok := ra["addrs"]; ok && len(items) == 0 {
			d.errorf(attr.Expr.Range(), "No redis addresses", "redis.addrs needs at least one host:port.")
		}
		r.MasterName = d.str(ra, "master_name", "")
		if r.Mode == "sentinel" && r.MasterName == "" {
			d.errorf(rb.DefRange, "Missing required argument", "Sentinel mode needs master_name.")
		}
		if attr, ok := ra["master_name"]; ok && r.Mode != "sentinel" {
			d.errorf(attr.NameRange, "Argument not valid here", "master_name applies to sentinel mode only.")
		}
		r.Username = d.str(ra, "username", "")
		r.Password, _ = d.secret(ra, "password")
		r.TLS = d.boolean(ra, "tls", false)
		if attr, ok := ra["tls_ca_file"]; ok {
			r.TLSCAFile = d.path(d.str(ra, "tls_ca_file", ""))
			if !r.TLS {
				d.errorf(attr.NameRange, "Argument not valid here", "tls_ca_file needs tls = true.")
			} else if _, err := os.Stat(r.TLSCAFile); err != nil {
				d.errorf(attr.Expr.Range(), "Cannot read tls_ca_file", "%s.", err)
			}
		}
		r.DB = int(d.integer(ra, "db", 0, 0))
		l.Redis = r
	}
	if l.Backend == "redis" && l.Redis == nil {
		d.errorf(b.DefRange, "Missing redis block", "backend = \"redis\" needs a redis block.")
	}
	return l
}

var subjectSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "trusted_proxies"}, {Name: "forwarded_header"}, {Name: "principal_header"},
	{Name: "api_key_header"}, {Name: "api_keys_file"}, {Name: "ipv6_prefix"},
}}

func (d *decoder) subject(b *hcl.Block) subject.Options {
	o := subject.Options{ForwardedHeader: "X-Forwarded-For", APIKeyHeader: "X-API-Key", IPv6Prefix: 64}
	if b == nil {
		return o
	}
	a := d.content(b.Body, subjectSchema).Attributes
	items, _ := d.list(a, "trusted_proxies")
	for _, it := range items {
		p, err := netip.ParsePrefix(it.value)
		if err != nil {
			if addr, aerr := netip.ParseAddr(it.value); aerr == nil {
				p = netip.PrefixFrom(addr, addr.BitLen())
			} else {
				d.errorf(it.rng, "Invalid CIDR", "%q is not an address or a CIDR prefix such as \"10.0.0.0/8\".", it.value)
				continue
			}
		}
		if p.Masked() != p {
			d.errorf(it.rng, "Invalid CIDR", "%q has bits set past its prefix length; did you mean %q?", it.value, p.Masked().String())
			continue
		}
		o.TrustedProxies = append(o.TrustedProxies, p)
	}
	o.ForwardedHeader = d.str(a, "forwarded_header", o.ForwardedHeader)
	o.PrincipalHeader = d.str(a, "principal_header", "")
	o.APIKeyHeader = d.str(a, "api_key_header", o.APIKeyHeader)
	for _, name := range []string{"forwarded_header", "principal_header", "api_key_header"} {
		if attr, ok := a[name]; ok {
			if v := d.str(a, name, ""); !isName(v) {
				d.errorf(attr.Expr.Range(), "Invalid header name", "%s must be a header name such as \"X-API-Key\".", name)
			}
		}
	}
	o.IPv6Prefix = int(d.integer(a, "ipv6_prefix", 64, 1))
	if attr, ok := a["ipv6_prefix"]; ok && o.IPv6Prefix > 128 {
		d.errorf(attr.Expr.Range(), "Invalid prefix length", "ipv6_prefix must be between 1 and 128.")
	}
	if attr, ok := a["api_keys_file"]; ok {
		o.KnownKeys = d.apiKeys(attr, d.path(d.str(a, "api_keys_file", "")))
	}
	d.subjectHasKeys = o.KnownKeys != nil
	d.subjectHasPrincipal = o.PrincipalHeader != "" && len(o.TrustedProxies) > 0
	return o
}

// apiKeys reads the known API keys: the SHA-256 of each key in hex, one a
// line; blank lines and lines starting with # are skipped.
func (d *decoder) apiKeys(attr *hcl.Attribute, path string) map[subject.KeyHash]struct{} {
	src, err := os.ReadFile(path)
	if err != nil {
		d.errorf(attr.Expr.Range(), "Cannot read api_keys_file", "%s.", err)
		return nil
	}
	keys := map[subject.KeyHash]struct{}{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var h subject.KeyHash
		if b, err := hex.DecodeString(line); err != nil || len(b) != len(h) {
			d.errorf(attr.Expr.Range(), "Invalid API key hash", "%s line %d is not a SHA-256 in hex (64 hex digits); store hashes, never keys (`gateway hash-key`).", path, n)
			continue
		} else {
			copy(h[:], b)
		}
		keys[h] = struct{}{}
	}
	return keys
}

var pseudonymSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "version", Required: true}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "key", LabelNames: []string{"version"}}},
}

var keySchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "secret", Required: true}}}

func (d *decoder) pseudonym(b *hcl.Block) *Pseudonym {
	c := d.content(b.Body, pseudonymSchema)
	p := &Pseudonym{Keys: map[int][]byte{}, Version: int(d.integer(c.Attributes, "version", 0, 1))}
	for _, kb := range c.Blocks.OfType("key") {
		v, err := strconv.Atoi(kb.Labels[0])
		if err != nil || v < 1 {
			d.errorf(kb.LabelRanges[0], "Invalid key version", "Key versions are whole numbers from 1, such as key \"2\".")
			continue
		}
		if _, dup := p.Keys[v]; dup {
			d.errorf(kb.LabelRanges[0], "Duplicate key version", "Key version %d is already defined.", v)
			continue
		}
		ka := d.content(kb.Body, keySchema).Attributes
		secret, ok := d.secret(ka, "secret")
		if !ok {
			continue
		}
		if len(secret) < subject.MinSecretBytes {
			d.errorf(ka["secret"].Expr.Range(), "HMAC secret too short", "The secret of key %d is %d bytes; at least %d are needed.", v, len(secret), subject.MinSecretBytes)
			continue
		}
		p.Keys[v] = []byte(secret)
	}
	if attr, ok := c.Attributes["version"]; ok && p.Version > 0 {
		if _, ok := p.Keys[p.Version]; !ok && !d.keyFailed(c.Blocks, p.Version) {
			d.errorf(attr.Expr.Range(), "Pseudonym version without a key", "version = %d, but there is no key \"%d\" block.", p.Version, p.Version)
		}
	}
	return p
}

// keyFailed reports whether a key block for version exists but was already
// reported, so the missing key is not reported twice.
func (d *decoder) keyFailed(blocks hcl.Blocks, version int) bool {
	for _, kb := range blocks.OfType("key") {
		if kb.Labels[0] == strconv.Itoa(version) {
			return true
		}
	}
	return false
}

var logSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "level"}, {Name: "access"}}}

func (d *decoder) log(b *hcl.Block) Log {
	l := Log{Level: "info", Access: true}
	if b == nil {
		return l
	}
	a := d.content(b.Body, logSchema).Attributes
	l.Level = d.str(a, "level", l.Level)
	if attr, ok := a["level"]; ok && !slices.Contains([]string{"debug", "info", "warn", "error"}, l.Level) {
		d.errorf(attr.Expr.Range(), "Unknown log level", "level must be debug, info, warn or error.")
	}
	l.Access = d.boolean(a, "access", l.Access)
	return l
}

// policyAttributes says which attributes each algorithm takes, and which of
// them it requires.
var policyAttributes = map[limiter.Algorithm]struct{ allowed, required []string }{
	limiter.FixedWindow:    {[]string{"limit", "window"}, []string{"limit", "window"}},
	limiter.SlidingCounter: {[]string{"limit", "window"}, []string{"limit", "window"}},
	limiter.TokenBucket:    {[]string{"capacity", "refill_tokens", "refill_period"}, []string{"capacity", "refill_tokens", "refill_period"}},
}

var policySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "algorithm", Required: true}, {Name: "limit"}, {Name: "window"},
		{Name: "capacity"}, {Name: "refill_tokens"}, {Name: "refill_period"},
		{Name: "revision"}, {Name: "max_cost"}, {Name: "cleanup_grace"},
		{Name: "max_clock_regression"}, {Name: "clock"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "dedup"}},
}

var dedupSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "enabled"}, {Name: "ttl"}, {Name: "max_entries"}, {Name: "max_bytes"},
}}

// maxExactInLua: the scripts compute in doubles, exact up to 2^53.
const maxExactInLua = 1 << 53

// policy decodes one policy block. It returns nil when the block is too
// broken to use; its problems are already reported.
func (d *decoder) policy(b *hcl.Block) *limiter.Policy {
	before := len(d.diags)
	c := d.content(b.Body, policySchema)
	a := c.Attributes
	attr, ok := a["algorithm"]
	if !ok {
		return nil
	}
	name := d.str(a, "algorithm", "")
	alg, ok := limiter.ParseAlgorithm(name)
	if !ok {
		d.errorf(attr.Expr.Range(), "Unknown algorithm", "algorithm must be fixed-window, sliding-counter or token-bucket, not %q.", name)
		return nil
	}
	shape := policyAttributes[alg]
	for _, other := range []string{"limit", "window", "capacity", "refill_tokens", "refill_period"} {
		if x, ok := a[other]; ok && !slices.Contains(shape.allowed, other) {
			d.errorf(x.NameRange, "Argument not valid for "+alg.String(), "%s does not apply to %s; it takes %s.", other, alg, strings.Join(shape.allowed, ", "))
		}
	}
	for _, req := range shape.required {
		if _, ok := a[req]; !ok {
			d.errorf(b.DefRange, "Missing required argument", "A %s policy needs %s.", alg, req)
		}
	}
	p := &limiter.Policy{
		Name:               b.Labels[0],
		Algorithm:          alg,
		Revision:           d.integer(a, "revision", 1, 1),
		Limit:              d.integer(a, "limit", 0, 1),
		Window:             d.duration(a, "window", 0, time.Millisecond),
		Capacity:           d.integer(a, "capacity", 0, 1),
		RefillTokens:       d.integer(a, "refill_tokens", 0, 1),
		RefillPeriod:       d.duration(a, "refill_period", 0, time.Millisecond),
		MaxCost:            d.integer(a, "max_cost", 1, 1),
		CleanupGrace:       d.duration(a, "cleanup_grace", limiter.DefaultCleanupGrace, 0),
		MaxClockRegression: d.duration(a, "max_clock_regression", limiter.DefaultMaxClockRegression, 0),
		Dedup:              limiter.DefaultDedup,
	}
	for n, v := range map[string]time.Duration{"window": p.Window, "refill_period": p.RefillPeriod} {
		if x, ok := a[n]; ok && v%time.Millisecond != 0 {
			d.errorf(x.Expr.Range(), "Duration below a millisecond", "%s must be a whole number of milliseconds.", n)
		}
	}
	switch clock := d.str(a, "clock", "redis"); clock {
	case "redis":
		p.Clock = limiter.ClockBackend
	case "gateway":
		p.Clock = limiter.ClockGateway
	default:
		d.errorf(a["clock"].Expr.Range(), "Unknown clock", "clock must be \"redis\" or \"gateway\", not %q.", clock)
	}
	if db := d.single(c.Blocks, "dedup"); db != nil {
		da := d.content(db.Body, dedupSchema).Attributes
		p.Dedup = limiter.Dedup{
			Enabled:    d.boolean(da, "enabled", true),
			TTL:        d.duration(da, "ttl", p.Dedup.TTL, time.Millisecond),
			MaxEntries: int(d.integer(da, "max_entries", int64(p.Dedup.MaxEntries), 1)),
			MaxBytes:   int(d.integer(da, "max_bytes", int64(p.Dedup.MaxBytes), 128)),
		}
	}
	if d.diags[before:].HasErrors() {
		return nil
	}
	if x, ok := a["max_cost"]; ok && p.MaxCost > p.Quota() {
		d.errorf(x.Expr.Range(), "max_cost above the quota", "max_cost is %d but the policy admits only %d at once.", p.MaxCost, p.Quota())
	}
	window := p.Window
	if alg == limiter.TokenBucket {
		window = p.RefillPeriod
	}
	if p.Quota() > maxExactInLua/max(window.Milliseconds(), 1)/4 {
		d.errorf(b.DefRange, "Policy too large", "The quota times the window in milliseconds must stay below 2^51 so every backend counts exactly.")
	}
	if err := p.Validate(); err != nil && !d.diags[before:].HasErrors() {
		d.errorf(b.DefRange, "Invalid policy", "%s.", err)
	}
	return p
}

var routeSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "host"}, {Name: "path", Required: true}, {Name: "methods"}, {Name: "upstream", Required: true},
	{Name: "policy"}, {Name: "subject"}, {Name: "cost"}, {Name: "max_body_bytes"},
}}

var defaultSources = []subject.Kind{subject.Principal, subject.APIKey, subject.ClientIP}

func (d *decoder) routes(blocks hcl.Blocks, policies map[string]*limiter.Policy, so *subject.Options) []proxy.Route {
	var routes []proxy.Route
	var ranges []hcl.Range
	labels := map[string]hcl.Range{}
	for _, b := range blocks {
		id := b.Labels[0]
		if !isName(id) {
			d.errorf(b.LabelRanges[0], "Invalid operation ID", "Route labels are letters, digits, '.', '-' and '_'.")
			continue
		}
		if first, dup := labels[id]; dup {
			d.errorf(b.LabelRanges[0], "Duplicate route", "A route labelled %q is already defined at %s.", id, first)
			continue
		}
		labels[id] = b.DefRange
		a := d.content(b.Body, routeSchema).Attributes
		r := proxy.Route{OperationID: id, Host: strings.ToLower(strings.TrimSuffix(d.str(a, "host", ""), "."))}
		if attr, ok := a["path"]; ok {
			raw := d.str(a, "path", "")
			p, err := proxy.NormalizePath(raw)
			if err != nil || strings.ContainsRune(p, ';') {
				d.errorf(attr.Expr.Range(), "Invalid path", "path must start with / and hold no encoded slash, dot segment parameters or control characters.")
			} else {
				r.Path = strings.TrimSuffix(p, "/")
				if r.Path == "" {
					r.Path = "/"
				}
			}
		}
		methods, _ := d.list(a, "methods")
		for _, m := range methods {
			if !isToken(m.value) {
				d.errorf(m.rng, "Invalid method", "%q is not an HTTP method.", m.value)
				continue
			}
			r.Methods = append(r.Methods, strings.ToUpper(m.value))
		}
		if attr, ok := a["upstream"]; ok {
			raw := d.str(a, "upstream", "")
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				d.errorf(attr.Expr.Range(), "Invalid upstream", "upstream must be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", raw)
			} else {
				r.Upstream = u
			}
		}
		r.Subject = defaultSources
		if items, ok := d.list(a, "subject"); ok {
			r.Subject = nil
			for _, it := range items {
				k, ok := subject.ParseKind(it.value)
				if !ok {
					d.errorf(it.rng, "Unknown subject source", "Sources are principal, api_key and client_ip, not %q.", it.value)
					continue
				}
				if slices.Contains(r.Subject, k) {
					d.errorf(it.rng, "Repeated subject source", "%s is already in the list.", it.value)
					continue
				}
				switch {
				case k == subject.APIKey && !d.subjectHasKeys:
					d.errorf(it.rng, "api_key needs known keys", "The api_key source counts only known keys; set subject.api_keys_file.")
				case k == subject.Principal && !d.subjectHasPrincipal:
					d.errorf(it.rng, "principal needs a trusted proxy", "The principal source needs subject.principal_header and subject.trusted_proxies.")
				}
				r.Subject = append(r.Subject, k)
			}
			if len(items) == 0 {
				d.errorf(a["subject"].Expr.Range(), "No subject source", "subject needs at least one source.")
			}
		}
		r.Cost = d.integer(a, "cost", 1, 1)
		r.MaxBodyBytes = d.integer(a, "max_body_bytes", d.maxBodyBytes, 0)
		if attr, ok := a["policy"]; ok {
			name := d.str(a, "policy", "")
			p, ok := policies[name]
			switch {
			case !ok:
				d.errorf(attr.Expr.Range(), "Unknown policy", "No policy block is named %q.", name)
			case p != nil:
				r.Policy = p
				if r.Cost > p.MaxCost {
					d.errorf(a["cost"].Expr.Range(), "Cost above max_cost", "cost is %d but policy %q allows at most %d.", r.Cost, name, p.MaxCost)
				}
			}
		} else if attr, ok := a["cost"]; ok {
			d.errorf(attr.NameRange, "Cost without a policy", "cost means nothing on a route without a policy.")
		}
		for i, o := range routes {
			if o.Host == r.Host && o.Path == r.Path && r.Path != "" && proxy.MethodsOverlap(o.Methods, r.Methods) {
				d.errorf(b.DefRange, "Routes overlap", "Route %q matches the same host, path and methods as %q at %s.", id, o.OperationID, ranges[i])
			}
		}
		routes = append(routes, r)
		ranges = append(ranges, b.DefRange)
	}
	return routes
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}
