package config

import "github.com/hashicorp/hcl/v2"

// The file as gohcl decodes it: the shape of every block, each value in its
// Go type, and the source range of each attribute a later check may point
// at. Durations stay strings until the check pass parses them; lists whose
// elements are checked one by one, and secrets, stay expressions so each
// problem points at its own element; an optional expression's *At range
// is the zero Range when the attribute is absent.

type fileBlock struct {
	Listen    *listenBlock     `hcl:"listen,block"`
	TLS       *tlsBlock        `hcl:"tls,block"`
	Limiter   *limiterBlock    `hcl:"limiter,block"`
	Subject   *subjectBlock    `hcl:"subject,block"`
	Pseudonym *pseudonymBlock  `hcl:"pseudonym,block"`
	Log       *logBlock        `hcl:"log,block"`
	Telemetry *telemetryBlock  `hcl:"telemetry,block"`
	Admin     *adminBlock      `hcl:"admin,block"`
	RLS       *rlsBlock        `hcl:"rls,block"`
	Policies  []*policyBlock   `hcl:"policy,block"`
	Upstreams []*upstreamBlock `hcl:"upstream,block"`
	Routes    []*routeBlock    `hcl:"route,block"`
	RLSRules  []*rlsRuleBlock  `hcl:"rls_rule,block"`
}

type listenBlock struct {
	HTTP                   *string   `hcl:"http,optional"`
	HTTPS                  *string   `hcl:"https,optional"`
	HTTP3                  *bool     `hcl:"http3,optional"`
	Admin                  *string   `hcl:"admin,optional"`
	RateLimitGRPC          *string   `hcl:"ratelimit_grpc,optional"`
	RateLimitGRPCTLS       *bool     `hcl:"ratelimit_grpc_tls,optional"`
	ShutdownTimeout        *string   `hcl:"shutdown_timeout,optional"`
	ReadHeaderTimeout      *string   `hcl:"read_header_timeout,optional"`
	IdleTimeout            *string   `hcl:"idle_timeout,optional"`
	MaxHeaderBytes         *int64    `hcl:"max_header_bytes,optional"`
	MaxConnections         *int64    `hcl:"max_connections,optional"`
	MaxPerClient           *int64    `hcl:"max_connections_per_client,optional"`
	MaxBodyBytes           *int64    `hcl:"max_body_bytes,optional"`
	AllowUnderscoreHeaders *bool     `hcl:"allow_underscore_headers,optional"`
	TunnelIdleTimeout      *string   `hcl:"tunnel_idle_timeout,optional"`
	BodyReadTimeout        *string   `hcl:"body_read_timeout,optional"`
	Body                   hcl.Body  `hcl:",body"`
	DefRange               hcl.Range `hcl:",def_range"`
}

type tlsBlock struct {
	RedirectHTTP          *bool              `hcl:"redirect_http,optional"`
	HSTSMaxAge            *string            `hcl:"hsts_max_age,optional"`
	HSTSIncludeSubdomains *bool              `hcl:"hsts_include_subdomains,optional"`
	ACME                  *acmeBlock         `hcl:"acme,block"`
	Certificates          []certificateBlock `hcl:"certificate,block"`
	ClientCAFile          *string            `hcl:"client_ca_file,optional"`
	ClientAuth            *string            `hcl:"client_auth,optional"`
	Body                  hcl.Body           `hcl:",body"`
	DefRange              hcl.Range          `hcl:",def_range"`
}

type acmeBlock struct {
	Domains    hcl.Expression `hcl:"domains"`
	Challenges hcl.Expression `hcl:"challenges,optional"`
	Email      *string        `hcl:"email,optional"`
	CA         *string        `hcl:"ca,optional"`
	CARoot     *string        `hcl:"ca_root,optional"`
	Storage    *string        `hcl:"storage,optional"`
	Body       hcl.Body       `hcl:",body"`
}

type certificateBlock struct {
	CertFile string   `hcl:"cert_file"`
	KeyFile  string   `hcl:"key_file"`
	Body     hcl.Body `hcl:",body"`
}

type limiterBlock struct {
	Backend           *string        `hcl:"backend,optional"`
	Deadline          *string        `hcl:"deadline,optional"`
	FailureRetryAfter *string        `hcl:"failure_retry_after,optional"`
	MaxDelayed        *int64         `hcl:"max_delayed,optional"`
	Memory            *memoryBlock   `hcl:"memory,block"`
	Redis             *redisBlock    `hcl:"redis,block"`
	Breaker           *breakerBlock  `hcl:"breaker,block"`
	Fallback          *fallbackBlock `hcl:"fallback,block"`
	Body              hcl.Body       `hcl:",body"`
	DefRange          hcl.Range      `hcl:",def_range"`
}

type breakerBlock struct {
	Enabled  *bool     `hcl:"enabled,optional"`
	Failures *int64    `hcl:"failures,optional"`
	Cooldown *string   `hcl:"cooldown,optional"`
	Body     hcl.Body  `hcl:",body"`
	DefRange hcl.Range `hcl:",def_range"`
}

type fallbackBlock struct {
	Instances int64     `hcl:"instances"`
	Body      hcl.Body  `hcl:",body"`
	DefRange  hcl.Range `hcl:",def_range"`
}

type memoryBlock struct {
	MaxEntries *int64   `hcl:"max_entries,optional"`
	Body       hcl.Body `hcl:",body"`
}

type redisBlock struct {
	Mode       *string        `hcl:"mode,optional"`
	Addrs      hcl.Expression `hcl:"addrs"`
	MasterName *string        `hcl:"master_name,optional"`
	Username   *string        `hcl:"username,optional"`
	Password   hcl.Expression `hcl:"password,optional"`
	TLS        *bool          `hcl:"tls,optional"`
	TLSCAFile  *string        `hcl:"tls_ca_file,optional"`
	KeyPrefix  *string        `hcl:"key_prefix,optional"`
	DB         *int64         `hcl:"db,optional"`
	Body       hcl.Body       `hcl:",body"`
	DefRange   hcl.Range      `hcl:",def_range"`
}

type subjectBlock struct {
	TrustedProxies  hcl.Expression `hcl:"trusted_proxies,optional"`
	ForwardedHeader *string        `hcl:"forwarded_header,optional"`
	PrincipalHeader *string        `hcl:"principal_header,optional"`
	APIKeyHeader    *string        `hcl:"api_key_header,optional"`
	PlanHeader      *string        `hcl:"plan_header,optional"`
	APIKeysFile     *string        `hcl:"api_keys_file,optional"`
	IPv6Prefix      *int64         `hcl:"ipv6_prefix,optional"`
	JWT             *jwtBlock      `hcl:"jwt,block"`
	Body            hcl.Body       `hcl:",body"`
}

type jwtBlock struct {
	Header     *string        `hcl:"header,optional"`
	JWKSFile   *string        `hcl:"jwks_file,optional"`
	JWKSURL    *string        `hcl:"jwks_url,optional"`
	Issuer     string         `hcl:"issuer"`
	Audience   hcl.Expression `hcl:"audience"`
	Claim      *string        `hcl:"claim,optional"`
	PlanClaim  *string        `hcl:"plan_claim,optional"`
	Leeway     *string        `hcl:"leeway,optional"`
	Algorithms hcl.Expression `hcl:"algorithms"`
	// MaxTokenBytes: longer tokens are refused before any of them is
	// decoded; default subject.DefaultMaxTokenBytes.
	MaxTokenBytes *int64 `hcl:"max_token_bytes,optional"`
	// InvalidTokenPolicy names the policy that invalid tokens are charged
	// to, per client address; default proxy.DefaultInvalidTokenPolicy.
	InvalidTokenPolicy *string   `hcl:"invalid_token_policy,optional"`
	Body               hcl.Body  `hcl:",body"`
	DefRange           hcl.Range `hcl:",def_range"`
}

type pseudonymBlock struct {
	Version *int64     `hcl:"version"`
	Keys    []keyBlock `hcl:"key,block"`
	Body    hcl.Body   `hcl:",body"`
}

type keyBlock struct {
	Version      string         `hcl:"version,label"`
	VersionRange hcl.Range      `hcl:"version,label_range"`
	Secret       hcl.Expression `hcl:"secret"`
}

type adminBlock struct {
	Token hcl.Expression `hcl:"token"`
}

// rlsBlock guards the rate limit service (listen.ratelimit_grpc).
type rlsBlock struct {
	Token hcl.Expression `hcl:"token"`
}

// rlsRuleBlock maps a domain and descriptor of Envoy's rate limit service
// to a route's budget or policies of its own (proxy.RLSRule).
type rlsRuleBlock struct {
	Name       string         `hcl:"name,label"`
	NameRange  hcl.Range      `hcl:"name,label_range"`
	Domain     string         `hcl:"domain"`
	Descriptor hcl.Expression `hcl:"descriptor"`
	Route      *string        `hcl:"route,optional"`
	Policies   hcl.Expression `hcl:"policies,optional"`
	Body       hcl.Body       `hcl:",body"`
	DefRange   hcl.Range      `hcl:",def_range"`
}

type telemetryBlock struct {
	OTLPEndpoint string    `hcl:"otlp_endpoint"`
	SampleRatio  *float64  `hcl:"sample_ratio,optional"`
	ServiceName  *string   `hcl:"service_name,optional"`
	Body         hcl.Body  `hcl:",body"`
	DefRange     hcl.Range `hcl:",def_range"`
}

type logBlock struct {
	Level  *string  `hcl:"level,optional"`
	Access *bool    `hcl:"access,optional"`
	Body   hcl.Body `hcl:",body"`
}

type policyBlock struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`

	Algorithm    *string `hcl:"algorithm"`
	Limit        *int64  `hcl:"limit,optional"`
	Window       *string `hcl:"window,optional"`
	Capacity     *int64  `hcl:"capacity,optional"`
	RefillTokens *int64  `hcl:"refill_tokens,optional"`
	RefillPeriod *string `hcl:"refill_period,optional"`
	LeaseTTL     *string `hcl:"lease_ttl,optional"`
	Calendar     *string `hcl:"calendar,optional"`
	Timezone     *string `hcl:"timezone,optional"`
	MaxDelay     *string `hcl:"max_delay,optional"`
	Lease        *int64  `hcl:"lease,optional"`
	Penalty      *string `hcl:"penalty,optional"`

	Revision           *int64  `hcl:"revision,optional"`
	MaxCost            *int64  `hcl:"max_cost,optional"`
	CleanupGrace       *string `hcl:"cleanup_grace,optional"`
	MaxClockRegression *string `hcl:"max_clock_regression,optional"`
	Clock              *string `hcl:"clock,optional"`
	Mode               *string `hcl:"mode,optional"`
	CountStatuses      []int   `hcl:"count_statuses,optional"`
	CostHeader         *string `hcl:"cost_header,optional"`
	Reserve            *int64  `hcl:"reserve,optional"`

	Dedup    *dedupBlock `hcl:"dedup,block"`
	Body     hcl.Body    `hcl:",body"`
	DefRange hcl.Range   `hcl:",def_range"`
}

type dedupBlock struct {
	Enabled    *bool    `hcl:"enabled,optional"`
	TTL        *string  `hcl:"ttl,optional"`
	MaxEntries *int64   `hcl:"max_entries,optional"`
	MaxBytes   *int64   `hcl:"max_bytes,optional"`
	Body       hcl.Body `hcl:",body"`
}

type routeBlock struct {
	OperationID      string    `hcl:"operation_id,label"`
	OperationIDRange hcl.Range `hcl:"operation_id,label_range"`

	Host         *string        `hcl:"host,optional"`
	Path         string         `hcl:"path"`
	Methods      hcl.Expression `hcl:"methods,optional"`
	Upstream     string         `hcl:"upstream"`
	Policy       *string        `hcl:"policy,optional"`
	Policies     hcl.Expression `hcl:"policies,optional"`
	Plans        hcl.Expression `hcl:"plans,optional"`
	Subject      hcl.Expression `hcl:"subject,optional"`
	Cost         *int64         `hcl:"cost,optional"`
	MaxBodyBytes *int64         `hcl:"max_body_bytes,optional"`

	ClientCertIdentity *string `hcl:"client_cert_identity,optional"`
	ClientCertHeader   *string `hcl:"client_cert_header,optional"`

	RewritePrefix   *string           `hcl:"rewrite_prefix,optional"`
	HostHeader      *string           `hcl:"host_header,optional"`
	RequestHeaders  *headerRulesBlock `hcl:"request_headers,block"`
	ResponseHeaders *headerRulesBlock `hcl:"response_headers,block"`
	Upgrade         hcl.Expression    `hcl:"upgrade,optional"`
	// CaseInsensitive and IgnoreExtensions fold the route's path as its
	// backend does (proxy.Route).
	CaseInsensitive  *bool          `hcl:"case_insensitive,optional"`
	IgnoreExtensions hcl.Expression `hcl:"ignore_extensions,optional"`
	// Priority and PlanPriority place the route's requests in the queue
	// of an upstream with an overload block.
	Priority     *string        `hcl:"priority,optional"`
	PlanPriority hcl.Expression `hcl:"plan_priority,optional"`
	Body         hcl.Body       `hcl:",body"`

	DefRange hcl.Range `hcl:",def_range"`
}

// headerRulesBlock is request_headers or response_headers: set is a map
// of header names to values, remove a list of names; both stay expressions
// so each problem points at its own name or value.
type headerRulesBlock struct {
	Set    hcl.Expression `hcl:"set,optional"`
	Remove hcl.Expression `hcl:"remove,optional"`
	Body   hcl.Body       `hcl:",body"`
}

type upstreamBlock struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`

	Targets         hcl.Expression `hcl:"targets,optional"`
	Balance         *string        `hcl:"balance,optional"`
	ConnectTimeout  *string        `hcl:"connect_timeout,optional"`
	ResponseTimeout *string        `hcl:"response_timeout,optional"`
	MaxFails        *int64         `hcl:"max_fails,optional"`
	FailTimeout     *string        `hcl:"fail_timeout,optional"`
	EjectOnTimeout  *bool          `hcl:"eject_on_timeout,optional"`
	MaxEjected      *int64         `hcl:"max_ejected_percent,optional"`
	Health          *healthBlock   `hcl:"health,block"`
	Overload        *overloadBlock `hcl:"overload,block"`
	Body            hcl.Body       `hcl:",body"`
	DefRange        hcl.Range      `hcl:",def_range"`
}

// overloadBlock is an upstream's limit on requests in flight and its
// queue (overload.Options).
type overloadBlock struct {
	Adaptive     *bool     `hcl:"adaptive,optional"`
	MinLimit     *int64    `hcl:"min_limit,optional"`
	MaxInFlight  int64     `hcl:"max_in_flight"`
	Queue        *int64    `hcl:"queue,optional"`
	QueueTimeout *string   `hcl:"queue_timeout,optional"`
	Body         hcl.Body  `hcl:",body"`
	DefRange     hcl.Range `hcl:",def_range"`
}

type healthBlock struct {
	Path     string    `hcl:"path"`
	Interval *string   `hcl:"interval,optional"`
	Timeout  *string   `hcl:"timeout,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}
