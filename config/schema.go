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
	Policies  []*policyBlock   `hcl:"policy,block"`
	Upstreams []*upstreamBlock `hcl:"upstream,block"`
	Routes    []*routeBlock    `hcl:"route,block"`
}

type listenBlock struct {
	HTTP                   *string   `hcl:"http,optional"`
	HTTPRange              hcl.Range `hcl:"http,attr_value_range"`
	HTTPS                  *string   `hcl:"https,optional"`
	HTTPSRange             hcl.Range `hcl:"https,attr_value_range"`
	Admin                  *string   `hcl:"admin,optional"`
	AdminRange             hcl.Range `hcl:"admin,attr_value_range"`
	ShutdownTimeout        *string   `hcl:"shutdown_timeout,optional"`
	ShutdownTimeoutRange   hcl.Range `hcl:"shutdown_timeout,attr_value_range"`
	ReadHeaderTimeout      *string   `hcl:"read_header_timeout,optional"`
	ReadHeaderTimeoutRange hcl.Range `hcl:"read_header_timeout,attr_value_range"`
	IdleTimeout            *string   `hcl:"idle_timeout,optional"`
	IdleTimeoutRange       hcl.Range `hcl:"idle_timeout,attr_value_range"`
	MaxHeaderBytes         *int64    `hcl:"max_header_bytes,optional"`
	MaxHeaderBytesRange    hcl.Range `hcl:"max_header_bytes,attr_value_range"`
	MaxConnections         *int64    `hcl:"max_connections,optional"`
	MaxConnectionsRange    hcl.Range `hcl:"max_connections,attr_value_range"`
	MaxPerClient           *int64    `hcl:"max_connections_per_client,optional"`
	MaxPerClientRange      hcl.Range `hcl:"max_connections_per_client,attr_value_range"`
	MaxBodyBytes           *int64    `hcl:"max_body_bytes,optional"`
	MaxBodyBytesRange      hcl.Range `hcl:"max_body_bytes,attr_value_range"`
	AllowUnderscoreHeaders *bool     `hcl:"allow_underscore_headers,optional"`
	TunnelIdleTimeout      *string   `hcl:"tunnel_idle_timeout,optional"`
	TunnelIdleTimeoutRange hcl.Range `hcl:"tunnel_idle_timeout,attr_value_range"`
	BodyReadTimeout        *string   `hcl:"body_read_timeout,optional"`
	BodyReadTimeoutRange   hcl.Range `hcl:"body_read_timeout,attr_value_range"`
	DefRange               hcl.Range `hcl:",def_range"`
}

type tlsBlock struct {
	RedirectHTTP          *bool              `hcl:"redirect_http,optional"`
	HSTSMaxAge            *string            `hcl:"hsts_max_age,optional"`
	HSTSMaxAgeRange       hcl.Range          `hcl:"hsts_max_age,attr_value_range"`
	HSTSIncludeSubdomains *bool              `hcl:"hsts_include_subdomains,optional"`
	ACME                  *acmeBlock         `hcl:"acme,block"`
	Certificates          []certificateBlock `hcl:"certificate,block"`
	DefRange              hcl.Range          `hcl:",def_range"`
}

type acmeBlock struct {
	Domains      hcl.Expression `hcl:"domains"`
	Challenges   hcl.Expression `hcl:"challenges,optional"`
	ChallengesAt hcl.Range      `hcl:"challenges,attr_range"`
	Email        *string        `hcl:"email,optional"`
	CA           *string        `hcl:"ca,optional"`
	CARange      hcl.Range      `hcl:"ca,attr_value_range"`
	CARoot       *string        `hcl:"ca_root,optional"`
	Storage      *string        `hcl:"storage,optional"`
}

type certificateBlock struct {
	CertFile      string    `hcl:"cert_file"`
	CertFileRange hcl.Range `hcl:"cert_file,attr_value_range"`
	KeyFile       string    `hcl:"key_file"`
	KeyFileRange  hcl.Range `hcl:"key_file,attr_value_range"`
}

type limiterBlock struct {
	Backend                *string        `hcl:"backend,optional"`
	BackendRange           hcl.Range      `hcl:"backend,attr_value_range"`
	Deadline               *string        `hcl:"deadline,optional"`
	DeadlineRange          hcl.Range      `hcl:"deadline,attr_value_range"`
	FailureRetryAfter      *string        `hcl:"failure_retry_after,optional"`
	FailureRetryAfterRange hcl.Range      `hcl:"failure_retry_after,attr_value_range"`
	Memory                 *memoryBlock   `hcl:"memory,block"`
	Redis                  *redisBlock    `hcl:"redis,block"`
	Breaker                *breakerBlock  `hcl:"breaker,block"`
	Fallback               *fallbackBlock `hcl:"fallback,block"`
	DefRange               hcl.Range      `hcl:",def_range"`
}

type breakerBlock struct {
	Enabled       *bool     `hcl:"enabled,optional"`
	Failures      *int64    `hcl:"failures,optional"`
	FailuresRange hcl.Range `hcl:"failures,attr_value_range"`
	Cooldown      *string   `hcl:"cooldown,optional"`
	CooldownRange hcl.Range `hcl:"cooldown,attr_value_range"`
	DefRange      hcl.Range `hcl:",def_range"`
}

type fallbackBlock struct {
	Instances      int64     `hcl:"instances"`
	InstancesRange hcl.Range `hcl:"instances,attr_value_range"`
	DefRange       hcl.Range `hcl:",def_range"`
}

type memoryBlock struct {
	MaxEntries      *int64    `hcl:"max_entries,optional"`
	MaxEntriesRange hcl.Range `hcl:"max_entries,attr_value_range"`
}

type redisBlock struct {
	Mode                *string        `hcl:"mode,optional"`
	ModeRange           hcl.Range      `hcl:"mode,attr_value_range"`
	Addrs               hcl.Expression `hcl:"addrs"`
	MasterName          *string        `hcl:"master_name,optional"`
	MasterNameNameRange hcl.Range      `hcl:"master_name,attr_name_range"`
	Username            *string        `hcl:"username,optional"`
	Password            hcl.Expression `hcl:"password,optional"`
	PasswordAt          hcl.Range      `hcl:"password,attr_range"`
	TLS                 *bool          `hcl:"tls,optional"`
	TLSCAFile           *string        `hcl:"tls_ca_file,optional"`
	TLSCAFileNameRange  hcl.Range      `hcl:"tls_ca_file,attr_name_range"`
	TLSCAFileRange      hcl.Range      `hcl:"tls_ca_file,attr_value_range"`
	KeyPrefix           *string        `hcl:"key_prefix,optional"`
	DB                  *int64         `hcl:"db,optional"`
	DBRange             hcl.Range      `hcl:"db,attr_value_range"`
	DefRange            hcl.Range      `hcl:",def_range"`
}

type subjectBlock struct {
	TrustedProxies       hcl.Expression `hcl:"trusted_proxies,optional"`
	TrustedProxiesAt     hcl.Range      `hcl:"trusted_proxies,attr_range"`
	ForwardedHeader      *string        `hcl:"forwarded_header,optional"`
	ForwardedHeaderRange hcl.Range      `hcl:"forwarded_header,attr_value_range"`
	PrincipalHeader      *string        `hcl:"principal_header,optional"`
	PrincipalHeaderRange hcl.Range      `hcl:"principal_header,attr_value_range"`
	APIKeyHeader         *string        `hcl:"api_key_header,optional"`
	APIKeyHeaderRange    hcl.Range      `hcl:"api_key_header,attr_value_range"`
	PlanHeader           *string        `hcl:"plan_header,optional"`
	PlanHeaderRange      hcl.Range      `hcl:"plan_header,attr_value_range"`
	APIKeysFile          *string        `hcl:"api_keys_file,optional"`
	APIKeysFileRange     hcl.Range      `hcl:"api_keys_file,attr_value_range"`
	IPv6Prefix           *int64         `hcl:"ipv6_prefix,optional"`
	IPv6PrefixRange      hcl.Range      `hcl:"ipv6_prefix,attr_value_range"`
	JWT                  *jwtBlock      `hcl:"jwt,block"`
}

type jwtBlock struct {
	Header         *string        `hcl:"header,optional"`
	HeaderRange    hcl.Range      `hcl:"header,attr_value_range"`
	JWKSFile       *string        `hcl:"jwks_file,optional"`
	JWKSFileRange  hcl.Range      `hcl:"jwks_file,attr_value_range"`
	JWKSURL        *string        `hcl:"jwks_url,optional"`
	JWKSURLRange   hcl.Range      `hcl:"jwks_url,attr_value_range"`
	Issuer         string         `hcl:"issuer"`
	IssuerRange    hcl.Range      `hcl:"issuer,attr_value_range"`
	Audience       hcl.Expression `hcl:"audience"`
	Claim          *string        `hcl:"claim,optional"`
	ClaimRange     hcl.Range      `hcl:"claim,attr_value_range"`
	PlanClaim      *string        `hcl:"plan_claim,optional"`
	PlanClaimRange hcl.Range      `hcl:"plan_claim,attr_value_range"`
	Leeway         *string        `hcl:"leeway,optional"`
	LeewayRange    hcl.Range      `hcl:"leeway,attr_value_range"`
	Algorithms     hcl.Expression `hcl:"algorithms"`
	// MaxTokenBytes: longer tokens are refused before any of them is
	// decoded; default subject.DefaultMaxTokenBytes.
	MaxTokenBytes      *int64    `hcl:"max_token_bytes,optional"`
	MaxTokenBytesRange hcl.Range `hcl:"max_token_bytes,attr_value_range"`
	// InvalidTokenPolicy names the policy that invalid tokens are charged
	// to, per client address; default proxy.DefaultInvalidTokenPolicy.
	InvalidTokenPolicy      *string   `hcl:"invalid_token_policy,optional"`
	InvalidTokenPolicyRange hcl.Range `hcl:"invalid_token_policy,attr_value_range"`
	DefRange                hcl.Range `hcl:",def_range"`
}

type pseudonymBlock struct {
	Version      *int64     `hcl:"version"`
	VersionRange hcl.Range  `hcl:"version,attr_value_range"`
	Keys         []keyBlock `hcl:"key,block"`
}

type keyBlock struct {
	Version      string         `hcl:"version,label"`
	VersionRange hcl.Range      `hcl:"version,label_range"`
	Secret       hcl.Expression `hcl:"secret"`
}

type logBlock struct {
	Level      *string   `hcl:"level,optional"`
	LevelRange hcl.Range `hcl:"level,attr_value_range"`
	Access     *bool     `hcl:"access,optional"`
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

	Revision           *int64  `hcl:"revision,optional"`
	MaxCost            *int64  `hcl:"max_cost,optional"`
	CleanupGrace       *string `hcl:"cleanup_grace,optional"`
	MaxClockRegression *string `hcl:"max_clock_regression,optional"`
	Clock              *string `hcl:"clock,optional"`
	Mode               *string `hcl:"mode,optional"`

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

	Host              *string        `hcl:"host,optional"`
	Path              string         `hcl:"path"`
	PathRange         hcl.Range      `hcl:"path,attr_value_range"`
	Methods           hcl.Expression `hcl:"methods,optional"`
	MethodsAt         hcl.Range      `hcl:"methods,attr_range"`
	Upstream          string         `hcl:"upstream"`
	UpstreamRange     hcl.Range      `hcl:"upstream,attr_value_range"`
	Policy            *string        `hcl:"policy,optional"`
	PolicyRange       hcl.Range      `hcl:"policy,attr_value_range"`
	PolicyName        hcl.Range      `hcl:"policy,attr_name_range"`
	Policies          hcl.Expression `hcl:"policies,optional"`
	PoliciesAt        hcl.Range      `hcl:"policies,attr_range"`
	Plans             hcl.Expression `hcl:"plans,optional"`
	PlansAt           hcl.Range      `hcl:"plans,attr_range"`
	Subject           hcl.Expression `hcl:"subject,optional"`
	SubjectAt         hcl.Range      `hcl:"subject,attr_range"`
	Cost              *int64         `hcl:"cost,optional"`
	CostRange         hcl.Range      `hcl:"cost,attr_value_range"`
	CostName          hcl.Range      `hcl:"cost,attr_name_range"`
	MaxBodyBytes      *int64         `hcl:"max_body_bytes,optional"`
	MaxBodyBytesRange hcl.Range      `hcl:"max_body_bytes,attr_value_range"`

	RewritePrefix      *string           `hcl:"rewrite_prefix,optional"`
	RewritePrefixRange hcl.Range         `hcl:"rewrite_prefix,attr_value_range"`
	HostHeader         *string           `hcl:"host_header,optional"`
	HostHeaderRange    hcl.Range         `hcl:"host_header,attr_value_range"`
	RequestHeaders     *headerRulesBlock `hcl:"request_headers,block"`
	ResponseHeaders    *headerRulesBlock `hcl:"response_headers,block"`
	Upgrade            hcl.Expression    `hcl:"upgrade,optional"`
	UpgradeAt          hcl.Range         `hcl:"upgrade,attr_range"`

	DefRange hcl.Range `hcl:",def_range"`
}

// headerRulesBlock is request_headers or response_headers: set is a map
// of header names to values, remove a list of names; both stay expressions
// so each problem points at its own name or value.
type headerRulesBlock struct {
	Set      hcl.Expression `hcl:"set,optional"`
	SetAt    hcl.Range      `hcl:"set,attr_range"`
	Remove   hcl.Expression `hcl:"remove,optional"`
	RemoveAt hcl.Range      `hcl:"remove,attr_range"`
}

type upstreamBlock struct {
	Name      string    `hcl:"name,label"`
	NameRange hcl.Range `hcl:"name,label_range"`

	Targets              hcl.Expression `hcl:"targets,optional"`
	TargetsAt            hcl.Range      `hcl:"targets,attr_range"`
	Balance              *string        `hcl:"balance,optional"`
	BalanceRange         hcl.Range      `hcl:"balance,attr_value_range"`
	ConnectTimeout       *string        `hcl:"connect_timeout,optional"`
	ConnectTimeoutRange  hcl.Range      `hcl:"connect_timeout,attr_value_range"`
	ResponseTimeout      *string        `hcl:"response_timeout,optional"`
	ResponseTimeoutRange hcl.Range      `hcl:"response_timeout,attr_value_range"`
	MaxFails             *int64         `hcl:"max_fails,optional"`
	MaxFailsRange        hcl.Range      `hcl:"max_fails,attr_value_range"`
	FailTimeout          *string        `hcl:"fail_timeout,optional"`
	FailTimeoutRange     hcl.Range      `hcl:"fail_timeout,attr_value_range"`
	Health               *healthBlock   `hcl:"health,block"`
	DefRange             hcl.Range      `hcl:",def_range"`
}

type healthBlock struct {
	Path          string    `hcl:"path"`
	PathRange     hcl.Range `hcl:"path,attr_value_range"`
	Interval      *string   `hcl:"interval,optional"`
	IntervalRange hcl.Range `hcl:"interval,attr_value_range"`
	Timeout       *string   `hcl:"timeout,optional"`
	TimeoutRange  hcl.Range `hcl:"timeout,attr_value_range"`
}
