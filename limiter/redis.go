package limiter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/lua"
)

// RedisMode is the topology the client expects.
type RedisMode string

const (
	RedisStandalone RedisMode = "standalone"
	RedisSentinel   RedisMode = "sentinel"
	RedisCluster    RedisMode = "cluster"
)

// RedisOptions configures a Redis backend.
type RedisOptions struct {
	Mode       RedisMode // default DefaultRedisMode
	Addrs      []string
	MasterName string // sentinel only
	Username   string
	Password   string
	// TLS speaks TLS to every node, trusting the system's roots, or only
	// those in the PEM file TLSCAFile (a private CA).
	TLS       bool
	TLSCAFile string
	DB        int
	// KeyPrefix starts every key; the rest of the key sits in a hash tag so
	// each subject's key lives on one Cluster slot. Default DefaultKeyPrefix.
	KeyPrefix string
	// Clock is read for policies whose Clock is ClockGateway, and times the
	// circuit breakers' cooldowns.
	Clock Clock
	// Logger receives the backend's state changes; nil discards them.
	Logger *slog.Logger
	// Breaker configures each node's circuit breaker, on by default.
	Breaker BreakerOptions
	// DisableBatching sends every decision as its own EVALSHA. By default
	// decisions that wait for the same node at the same moment share one
	// write and one read (a pipeline); each is still its own script call.
	DisableBatching bool
	// DenialCacheEntries bounds the certain denials remembered in this
	// instance and answered without Redis until they can end, so a subject
	// flooding past its limit costs Redis about one call per denial period
	// (docs/redis.md). Default 32768; negative turns the cache off.
	DenialCacheEntries int
	// Registerer receives the backend's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Defaults of RedisOptions.
const (
	DefaultRedisMode = RedisStandalone
	DefaultKeyPrefix = "rl:"
)

// Redis is the shared backend: any number of gateway instances that point
// at one Redis share one budget per policy and subject. Decisions are made
// by the scripts of package lua, registered with SCRIPT LOAD and run with
// EVALSHA only; on NOSCRIPT the scripts are loaded again (once, however
// many requests notice) and the call is retried once. EVAL is never used.
//
// Each call is sent at most once unless its effect is known to be nil
// (NOSCRIPT, MOVED) or de-duplication makes a repeat harmless: the client
// is built without go-redis's own retries for that reason.
type Redis struct {
	mode    RedisMode
	client  redis.UniversalClient
	cluster *redis.ClusterClient // set in cluster mode
	// clusterNodes maps a node's address to its client, for redirects:
	// MOVED and ASK name the node to go to. Filled as go-redis creates
	// clients (OnNewNode).
	clusterNodes sync.Map
	// slotsAsked is when a slot map reload was last asked for (unix nanos).
	slotsAsked atomic.Int64
	prefix     string
	clock      Clock
	script     *script
	// policies holds a *compiledPolicy per *Policy; compiledCount bounds it.
	policies      sync.Map
	compiledCount atomic.Int64
	denials       *denials // nil: off

	batching bool
	breakers BreakerOptions
	// nodes holds what each Redis node gets of its own: a batcher and a
	// circuit breaker. Every decision reads it; it is replaced, never
	// changed, under nodesMu when a node appears or on Close (nil: closed).
	nodesMu sync.Mutex
	nodes   atomic.Pointer[map[*redis.Client]*node]

	// loading admits one load at a time; a caller waits for it no longer
	// than its own deadline. loadGen is bumped by every successful load.
	loading chan struct{}
	loadGen atomic.Uint64

	logger *slog.Logger
	// connected turns true once the scripts were loaded and the topology
	// checked; until then notReady holds the last reason, and connect runs.
	connected   atomic.Bool
	notReady    atomic.Pointer[error]
	stopConnect chan struct{}
	connectDone chan struct{}
	stopWatch   chan struct{}
	watchDone   chan struct{}

	m redisMetrics
}

type script struct {
	name string
	src  string
	sha  string
}

type redisMetrics struct {
	restarts    prometheus.Counter
	latency     *prometheus.HistogramVec
	breakerOpen *prometheus.GaugeVec
	batch       prometheus.Histogram
	cached      prometheus.Counter
	reloads     prometheus.Counter
	errors      *prometheus.CounterVec
}

// Client timeouts. Each stays well under the 750ms deadline, and the
// deadline itself bounds every call (ContextTimeoutEnabled).
const (
	redisDialTimeout  = 250 * time.Millisecond
	redisReadTimeout  = 500 * time.Millisecond
	redisWriteTimeout = 250 * time.Millisecond
	redisPoolTimeout  = 100 * time.Millisecond
)

// The script runs these commands as the configured user; with EVALSHA,
// SCRIPT LOAD, PING and HELLO they are all an ACL user needs:
//
//	ACL SETUSER gateway on >secret ~rl:* -@all +evalsha +script|load +ping +hello
//	    +time +hmget +hset +pexpire +get +set +rpush +lpop +del

// NewRedis connects, checks the topology and loads the scripts. It fails
// rather than start a backend that would deny or fail every request.
func NewRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("redis: no addresses")
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	if opts.Mode == "" {
		opts.Mode = DefaultRedisMode
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultKeyPrefix
	}
	var tc *tls.Config
	if opts.TLS {
		var err error
		if tc, err = tlsConfig(opts.TLSCAFile); err != nil {
			return nil, err
		}
	} else if opts.TLSCAFile != "" {
		return nil, errors.New("redis: tls_ca_file needs tls")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Redis{mode: opts.Mode, prefix: opts.KeyPrefix, clock: opts.Clock,
		script:   &script{name: "ratelimit", src: lua.Script, sha: redis.NewScript(lua.Script).Hash()},
		batching: !opts.DisableBatching, breakers: opts.Breaker, logger: opts.Logger,
		loading: make(chan struct{}, 1)}
	r.nodes.Store(&map[*redis.Client]*node{})
	switch {
	case opts.DenialCacheEntries == 0:
		r.denials = newDenials(defaultDenialEntries)
	case opts.DenialCacheEntries > 0:
		r.denials = newDenials(opts.DenialCacheEntries)
	}
	// One set of client options for every mode: no retries inside go-redis
	// (a retry could charge twice), deadlines from the context, one dial
	// attempt, and timeouts well inside the decision deadline.
	uo := &redis.UniversalOptions{
		Addrs: opts.Addrs, MasterName: opts.MasterName,
		Username: opts.Username, Password: opts.Password, DB: opts.DB, TLSConfig: tc,
		DialTimeout: redisDialTimeout, ReadTimeout: redisReadTimeout, WriteTimeout: redisWriteTimeout,
		PoolTimeout: redisPoolTimeout, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true,
		DialerRetries: 1, DialerRetryTimeout: 5 * time.Millisecond,
	}
	switch opts.Mode {
	case RedisStandalone:
		r.client = redis.NewClient(uo.Simple())
	case RedisSentinel:
		r.client = redis.NewFailoverClient(uo.Failover())
	case RedisCluster:
		r.cluster = redis.NewClusterClient(uo.Cluster())
		r.cluster.OnNewNode(func(c *redis.Client) { r.clusterNodes.Store(c.Options().Addr, c) })
		r.client = r.cluster
	default:
		return nil, fmt.Errorf("redis: unknown mode %q", opts.Mode)
	}
	r.registerMetrics(opts.Registerer)
	err := r.load(ctx, 0)
	if err == nil {
		err = r.checkTopology(ctx)
	}
	switch {
	case err == nil:
		r.connected.Store(true)
	case misconfigured(err):
		r.client.Close()
		return nil, err
	default:
		// Not there yet, or not answering: serve without it and keep trying.
		r.logger.Warn("redis not reachable at start-up; connecting in the background", "error", err.Error())
		r.notReady.Store(&err)
		r.stopConnect = make(chan struct{})
		r.connectDone = make(chan struct{})
		go r.connect()
	}
	seen := map[string]string{}
	if r.connected.Load() {
		r.readRunIDs(seen) // an ACL without +info is said once, by the watcher
	}
	r.stopWatch, r.watchDone = make(chan struct{}), make(chan struct{})
	go r.watchRestarts(restartWatchInterval, seen)
	return r, nil
}

// misconfigured reports whether err shows that Redis answered and the
// configuration is wrong for it (credentials, ACL, topology, scripts): a
// start-up error, which waiting will not cure.
func misconfigured(err error) bool {
	return redis.IsAuthError(err) || redis.IsPermissionError(err) ||
		errors.Is(err, errTopology) || errors.Is(err, errScriptMismatch)
}

var (
	errTopology       = errors.New("redis topology is not the configured mode")
	errScriptMismatch = errors.New("redis computed another script hash")
)

// connect loads the scripts and checks the topology until both succeed,
// waiting at most a second between tries.
func (r *Redis) connect() {
	defer close(r.connectDone)
	wait := 50 * time.Millisecond
	for {
		select {
		case <-r.stopConnect:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.tryConnect(ctx)
		cancel()
		if err == nil {
			return
		}
		wait = min(2*wait, time.Second)
	}
}

// tryConnect loads the scripts and checks the topology once; when both
// succeed the backend is connected for good. Both connect and Ready call
// it, so readiness never waits for connect's next try.
func (r *Redis) tryConnect(ctx context.Context) error {
	err := r.load(ctx, 0)
	if err == nil {
		err = r.checkTopology(ctx)
	}
	if err != nil {
		if !r.connected.Load() {
			r.notReady.Store(&err)
		}
		return err
	}
	if !r.connected.Swap(true) {
		r.notReady.Store(nil)
		r.logger.Info("redis reachable; scripts loaded")
	}
	return nil
}

func (r *Redis) registerMetrics(reg prometheus.Registerer) {
	r.m = redisMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gateway_redis_evalsha_duration_seconds",
			Help:    "EVALSHA round trips, by result.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, .75},
		}, []string{"result"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_redis_restarts_seen_total",
			Help: "Redis restarts seen as a change of a master's run_id; without persistence each hands every subject a fresh budget.",
		}),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_limiter_breaker_open",
			Help: "1 while the circuit breaker of a Redis node is open or probing, 0 once closed.",
		}, []string{"node"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gateway_redis_batch_size",
			Help:    "Script calls sent to Redis in one write.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		cached: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_limiter_cached_denials_total",
			Help: "Denials answered from this instance's memory of a certain denial, without a Redis call.",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_redis_noscript_reloads_total",
			Help: "Times the scripts were loaded again after NOSCRIPT.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_redis_errors_total",
			Help: "Redis errors by cause.",
		}, []string{"cause"}),
	}
	if reg != nil {
		reg.MustRegister(r.m.restarts, r.m.latency, r.m.breakerOpen, r.m.batch, r.m.cached, r.m.reloads, r.m.errors)
	}
}

// Close stops connecting and the batchers, then closes the client.
func (r *Redis) Close() error {
	if r.stopConnect != nil {
		close(r.stopConnect)
		<-r.connectDone
	}
	close(r.stopWatch)
	<-r.watchDone
	r.nodesMu.Lock()
	nodes := r.nodes.Swap(nil)
	r.nodesMu.Unlock()
	for _, n := range *nodes {
		if n.batcher != nil {
			n.batcher.close()
		}
	}
	return r.client.Close()
}

// node is one Redis node's share of the backend.
type node struct {
	batcher *batcher // nil: batching is off
	breaker *breaker // nil: the breaker is off
}

var errCircuitOpen = errors.New("redis: circuit breaker open")

// nodeState is c's node, made on first use.
func (r *Redis) nodeState(c *redis.Client) (*node, error) {
	nodes := r.nodes.Load()
	if nodes == nil {
		return nil, fmt.Errorf("%w: %w", errNotSent, redis.ErrClosed)
	}
	if n := (*nodes)[c]; n != nil {
		return n, nil
	}
	r.nodesMu.Lock()
	defer r.nodesMu.Unlock()
	nodes = r.nodes.Load()
	if nodes == nil {
		return nil, fmt.Errorf("%w: %w", errNotSent, redis.ErrClosed)
	}
	if n := (*nodes)[c]; n != nil {
		return n, nil
	}
	n := &node{}
	if r.batching {
		n.batcher = newBatcher(c, r.m.batch)
	}
	if !r.breakers.Disabled {
		addr := c.Options().Addr
		if addr == "" || r.mode == RedisSentinel {
			addr = "sentinel-master"
		}
		n.breaker = newBreaker(addr, r.breakers, r.m.breakerOpen.WithLabelValues(addr), r.logger)
	}
	next := make(map[*redis.Client]*node, len(*nodes)+1)
	maps.Copy(next, *nodes)
	next[c] = n
	r.nodes.Store(&next)
	return n, nil
}

// send runs one EVALSHA on node c: refused at once while its breaker is
// open, batched with others unless batching is off. With asking it is sent
// alone, after ASKING on the same connection, as an ASK redirect requires.
func (r *Redis) send(ctx context.Context, c *redis.Client, sha string, keys []string, args []any, asking bool) (any, error) {
	n, err := r.nodeState(c)
	if err != nil {
		return nil, err
	}
	if n.breaker != nil && !n.breaker.allow(r.clock.Now()) {
		return nil, errCircuitOpen
	}
	var v any
	switch {
	case asking:
		pipe := c.Pipeline()
		pipe.Do(ctx, "ASKING")
		cmd := pipe.EvalSha(ctx, sha, keys, args...)
		pipe.Exec(ctx)
		v, err = cmd.Result()
	case n.batcher != nil:
		v, err = n.batcher.evalSha(ctx, sha, keys, args)
	default:
		v, err = c.EvalSha(ctx, sha, keys, args...).Result()
	}
	if n.breaker != nil {
		if errors.Is(err, context.Canceled) {
			n.breaker.abandon() // a caller that went away says nothing of the node
		} else {
			n.breaker.record(!nodeFailed(err), r.clock.Now())
		}
	}
	return v, err
}

// nodeFailed reports whether a call's error counts against its node: one
// that ends Unavailable or Indeterminate. A script's own error reply (a
// NOSCRIPT, a WRONGTYPE) shows the node answering, and so does a Cluster's
// redirect (MOVED, ASK) or TRYAGAIN while a slot moves.
func nodeFailed(err error) bool {
	if err == nil || redis.HasErrorPrefix(err, "NOSCRIPT") || isRedirect(err) || redis.IsTryAgainError(err) {
		return false
	}
	_, o := classifyRedisError(err)
	switch o.(type) {
	case Unavailable, Indeterminate:
		return true
	}
	return false
}

// load registers every script, on every node in Cluster mode. A caller
// that saw NOSCRIPT passes the generation it ran under: if another caller
// has loaded since, there is nothing left to do, so a failover that makes
// every request see NOSCRIPT causes one load, not one per request.
func (r *Redis) load(ctx context.Context, seenGen uint64) error {
	select {
	case r.loading <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a script load: %w", errNotSent, ctx.Err())
	}
	defer func() { <-r.loading }()
	if r.loadGen.Load() > seenGen {
		return nil
	}
	s := r.script
	sha, err := r.client.ScriptLoad(ctx, s.src).Result()
	if err != nil {
		return fmt.Errorf("load script %s: %w", s.name, err)
	}
	if sha != s.sha {
		return fmt.Errorf("load script %s: server says sha %s, expected %s: %w", s.name, sha, s.sha, errScriptMismatch)
	}
	if seenGen > 0 {
		// A load after one that worked: the server lost the scripts.
		r.m.reloads.Inc()
	}
	r.loadGen.Add(1)
	return nil
}

func (r *Redis) generation() uint64 { return r.loadGen.Load() }

// checkTopology runs the real script path on canary keys spread over the
// hash slots: a standalone client pointed at a Cluster node gets MOVED for
// some of them, which is a configuration error, not a denial.
func (r *Redis) checkTopology(ctx context.Context) error {
	for i := 0; i < 8; i++ {
		if err := r.canary(ctx, "ready-"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

var canaryPolicies = []*Policy{{Name: "canary", Algorithm: FixedWindow, Revision: 1, Limit: 1 << 40, Window: time.Second,
	MaxCost: 1, CleanupGrace: time.Second, Clock: ClockBackend}}

func (r *Redis) canary(ctx context.Context, tag string) error {
	key := r.prefix + "{canary:" + tag + "}"
	_, err := r.evalsha(ctx, r.script, []string{key}, r.args(canaryPolicies, 1))
	if err != nil {
		if _, moved := redis.IsMovedError(err); moved && r.mode != RedisCluster {
			return fmt.Errorf("redis at %s is a Cluster node, but mode is %s: %w: %w", key, r.mode, errTopology, err)
		}
		return fmt.Errorf("redis readiness: %w", err)
	}
	return nil
}

// Ready runs the script path on canary keys, with NOSCRIPT recovery, for
// /readyz: it fails while Redis is unreachable, the ACL denies EVALSHA or
// SCRIPT LOAD, or the topology is not the configured one. Until the backend
// has connected once it tries to connect itself rather than wait for the
// background loop's next try (up to a second away), so it is ready no
// later than the first decision Redis answers.
func (r *Redis) Ready(ctx context.Context) error {
	if !r.connected.Load() {
		if err := r.tryConnect(ctx); err != nil {
			return fmt.Errorf("connecting to redis: %w", err)
		}
		return nil
	}
	return r.checkTopology(ctx)
}

// key is the Redis key of a policy revision and subject:
// <prefix>{<subject>}:<policy>:<revision>. The hash tag is the subject
// alone, so all the policies of one subject and operation (the pseudonym
// covers both) live on one Cluster slot and one script can decide them
// together. The subject is a pseudonym, so no raw identity reaches Redis.
func (r *Redis) key(p *Policy, subject string) string {
	return r.prefix + "{" + subject + r.compiled(p).keyTail
}

// compiledPolicy is what every call of one policy shares, made once: the
// end of its keys and its script arguments, boxed once.
type compiledPolicy struct {
	policy  Policy // what it was made from: a policy changed in place is made again
	keyTail string // "}:" + name + ":" + revision
	args    [argsPerPolicy]any
	dedup   [3]any // ARGV 3 to 5, when it is a request's first policy
}

// The script's ARGV (lua/prelude.lua): argsHead values for the request,
// then argsPerPolicy for each policy, of which argNow is the clock.
const (
	argsHead      = 5
	argsPerPolicy = 8
	argNow        = 1
)

// maxCompiled bounds the compiled policies kept: every reload brings new
// ones, and the old ones are not told apart from those still in use.
const maxCompiled = 1024

func (r *Redis) compiled(p *Policy) *compiledPolicy {
	if v, ok := r.policies.Load(p); ok {
		if c := v.(*compiledPolicy); c.policy == *p {
			return c
		}
	}
	c := &compiledPolicy{policy: *p, keyTail: "}:" + p.Name + ":" + strconv.FormatInt(p.Revision, 10)}
	shadow := 0
	if p.Shadow {
		shadow = 1
	}
	c.args = [argsPerPolicy]any{
		int(p.Algorithm), "", p.Quota(), p.Period().Milliseconds(), p.RefillTokens,
		p.CleanupGrace.Milliseconds(), p.MaxClockRegression.Milliseconds(), shadow,
	}
	c.dedup = [3]any{p.Dedup.TTL.Milliseconds(), p.Dedup.MaxEntries, p.Dedup.MaxBytes}
	if r.compiledCount.Add(1) > maxCompiled {
		r.policies.Clear()
		r.compiledCount.Store(1)
	}
	r.policies.Store(p, c)
	return c
}

// keys are the keys of one call: each policy's state and, with
// de-duplication (evaluationID not empty), the evaluation's record and the
// list of remembered IDs, all cut from one string. They share the
// subject's hash tag: one Cluster slot. See lua/prelude.lua.
func (r *Redis) keys(ps []*Policy, subject, evaluationID string) []string {
	var tailsOn [scratchPolicies]string
	tails := tailsOn[:0]
	head := len(r.prefix) + 1 + len(subject)
	size := 0
	for _, p := range ps {
		t := r.compiled(p).keyTail
		tails = append(tails, t)
		size += head + len(t)
	}
	first := head + len(tails[0])
	record := first + len(":e:") + len(evaluationID)
	if evaluationID != "" {
		size += record + first + len(":q")
	}
	var b strings.Builder
	b.Grow(size)
	key := func(tail, suffix, id string) {
		b.WriteString(r.prefix)
		b.WriteByte('{')
		b.WriteString(subject)
		b.WriteString(tail)
		b.WriteString(suffix)
		b.WriteString(id)
	}
	for _, t := range tails {
		key(t, "", "")
	}
	if evaluationID != "" {
		key(tails[0], ":e:", evaluationID)
		key(tails[0], ":q", "")
	}
	all := b.String()
	keys := make([]string, 0, len(ps)+2)
	at := 0
	for _, t := range tails {
		keys = append(keys, all[at:at+head+len(t)])
		at += head + len(t)
	}
	if evaluationID != "" {
		keys = append(keys, all[at:at+record], all[at+record:])
	}
	return keys
}

// args is the script's ARGV for a request of cost over ps.
func (r *Redis) args(ps []*Policy, cost int64) []any {
	args := make([]any, argsHead, argsHead+argsPerPolicy*len(ps))
	for i, p := range ps {
		c := r.compiled(p)
		if i == 0 {
			args[0], args[1] = len(ps), cost
			copy(args[2:argsHead], c.dedup[:])
		}
		args = append(args, c.args[:]...)
		if p.Clock == ClockGateway {
			args[len(args)-argsPerPolicy+argNow] = strconv.FormatInt(r.clock.Now().UnixMilli(), 10)
		}
	}
	return args
}

// withDeadline bounds ctx by deadline, unless it is zero.
func withDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// Evaluate decides one request, in one script call over the keys of all
// its policies (one hash tag, one slot). A denial the instance remembers
// for the same policies, subject and cost answers without Redis; a lost
// reply is retried once under the same evaluation ID when the first policy
// de-duplicates.
func (r *Redis) Evaluate(ctx context.Context, req Request) Outcome {
	if o := admit(ctx, req); o != nil {
		return o
	}
	ps := req.Policies
	dk := newDenialKey(ps, req.Subject, req.Cost)
	sent := r.now(ps[0])
	if r.denials != nil {
		if e, ok := r.denials.get(dk, ps, sent); ok {
			r.m.cached.Inc()
			return e
		}
	}
	// After the cache: a deadline costs a timer, and a remembered denial
	// needs none.
	ctx, cancel := withDeadline(ctx, req.Deadline)
	defer cancel()
	dedup := ps[0].Dedup.Enabled && req.EvaluationID != ""
	id := ""
	if dedup {
		id = req.EvaluationID
	}
	keys := r.keys(ps, req.Subject, id)
	args := r.args(ps, req.Cost)
	o := r.decide(ctx, ps, keys, args)
	if _, ambiguous := o.(Indeterminate); ambiguous && dedup && ctx.Err() == nil {
		// The first call may have been charged; the same evaluation ID makes
		// a repeat return that first result instead of charging again.
		o = r.decide(ctx, ps, keys, args)
	}
	if e, ok := o.(Evaluated); ok && r.denials != nil {
		r.denials.put(dk, ps, e, sent)
	}
	return o
}

// now is the clock the policy's decisions are placed by, as far as this
// instance can read it: the injected clock for ClockGateway, and for
// ClockBackend the local one, which runs at Redis's rate.
func (r *Redis) now(p *Policy) time.Time {
	if p.Clock == ClockGateway {
		return r.clock.Now()
	}
	return time.Now()
}

func (r *Redis) decide(ctx context.Context, ps []*Policy, keys []string, args []any) Outcome {
	reply, err := r.evalsha(ctx, r.script, keys, args)
	if err != nil {
		return r.classify(err)
	}
	return decodeReply(ps, reply)
}

var errMalformedReply = errors.New("redis: malformed script reply")

// Script reply statuses; see lua/prelude.lua.
const (
	replyDecided     = 0
	replyClockUnsafe = 1
	replyUnreadable  = 2
	replyReplayed    = 3
)

// decodeReply reads the script's reply: a status, then four numbers per
// policy.
func decodeReply(ps []*Policy, reply []any) Outcome {
	if len(reply) == 0 {
		return Indeterminate{Err: errMalformedReply}
	}
	status, ok := reply[0].(int64)
	if !ok {
		return Indeterminate{Err: errMalformedReply}
	}
	switch status {
	case replyClockUnsafe:
		return Unavailable{Category: ClockUnsafe}
	case replyUnreadable:
		return Incompatible{Reason: StateUnreadable}
	case replyDecided, replyReplayed:
	default:
		return Indeterminate{Err: errMalformedReply}
	}
	if len(reply) != 1+4*len(ps) {
		return Indeterminate{Err: errMalformedReply}
	}
	var eachOn [scratchPolicies]Decision
	each := eachOn[:0]
	for i, p := range ps {
		var n [4]int64
		for j := range n {
			x, ok := reply[1+4*i+j].(int64)
			if !ok {
				return Indeterminate{Err: errMalformedReply}
			}
			n[j] = x
		}
		each = append(each, p.decision(n[0] == 1, n[1], ms(n[2]), ms(n[3])))
	}
	return evaluated(ps, each)
}

// evalsha sends one EVALSHA; on NOSCRIPT it loads the scripts and sends once
// more. In a Cluster it follows MOVED (the slot has a new owner) and ASK
// (the slot is being migrated and the key has left) to the node they name,
// and waits a little and sends again on TRYAGAIN (the slot is being
// migrated and the script's keys are split between the two nodes, or not
// all there). Every one of those replies means the script did not run.
func (r *Redis) evalsha(ctx context.Context, s *script, keys []string, args []any) ([]any, error) {
	key := keys[0]
	var err error
	noscriptRetried, redirects, tryAgains := false, 0, 0
	var redirected *redis.Client // the node a MOVED or ASK named
	asking := false              // the next call is sent after ASKING
	for {
		gen := r.generation()
		c := redirected
		if c == nil {
			if c, err = r.nodeFor(ctx, key); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		var v any
		v, err = r.send(ctx, c, s.sha, keys, args, asking)
		result := "ok"
		if err != nil {
			result = "error"
		}
		r.m.latency.WithLabelValues(result).Observe(time.Since(start).Seconds())
		switch {
		case err == nil:
			reply, ok := v.([]any)
			if !ok {
				return nil, errMalformedReply
			}
			return reply, nil
		case redis.HasErrorPrefix(err, "NOSCRIPT") && !noscriptRetried:
			noscriptRetried = true
			if lerr := r.load(ctx, gen); lerr != nil {
				return nil, lerr
			}
		case r.cluster != nil && redirects < maxRedirects && isRedirect(err):
			redirects++
			addr, ask := redirectTarget(err)
			if !ask {
				// The slot map is out of date; until it is reloaded, the
				// reply says where to go.
				r.cluster.ReloadState(ctx)
			}
			target, known := r.clusterNodes.Load(addr)
			if !known {
				r.cluster.ReloadState(ctx)
				return nil, err
			}
			redirected, asking = target.(*redis.Client), ask
		case r.cluster != nil && tryAgains < len(tryAgainPauses) && redis.IsTryAgainError(err):
			pause := tryAgainPauses[tryAgains]
			tryAgains++
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 2*pause {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
			// From the slot's owner again: the migration may have moved on.
			redirected, asking, redirects = nil, false, 0
		default:
			if r.cluster != nil && nodeFailed(err) {
				r.reloadSlots()
			}
			return nil, err
		}
	}
}

// maxRedirects bounds the MOVED and ASK replies one call follows: a slot
// that moved and is moving again takes two.
const maxRedirects = 3

// tryAgainPauses are the waits before each new try after TRYAGAIN. A slot
// holds few keys of a subject, which move in one MIGRATE, so the split
// rarely lasts longer than a few milliseconds; a migration held halfway
// for longer is a 503 rather than a wait for the whole deadline.
var tryAgainPauses = []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}

func isRedirect(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	_, ok := redis.IsAskError(err)
	return ok
}

// redirectTarget is the address a MOVED or ASK names, and whether it was
// ASK.
func redirectTarget(err error) (addr string, ask bool) {
	if addr, ok := redis.IsAskError(err); ok {
		return addr, true
	}
	addr, _ = redis.IsMovedError(err)
	return addr, false
}

// slotReloadGap is the least time between two slot map reloads asked for
// because a node failed.
const slotReloadGap = 100 * time.Millisecond

// reloadSlots asks go-redis to reload the Cluster's slot map in the
// background, at most once per slotReloadGap. A node that fails may have
// lost its slots to a replica; go-redis would otherwise go on sending to
// it until its own periodic reload, a minute later, since a dead node
// sends no MOVED.
func (r *Redis) reloadSlots() {
	now := time.Now().UnixNano()
	last := r.slotsAsked.Load()
	if now-last < int64(slotReloadGap) || !r.slotsAsked.CompareAndSwap(last, now) {
		return
	}
	r.cluster.ReloadState(context.Background())
}

// nodeFor is the client that owns key. In Cluster mode the call goes to
// the slot's master directly, so that go-redis does not re-send it on a
// timeout or a broken connection as its cluster client would.
func (r *Redis) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	if r.cluster != nil {
		return r.cluster.MasterForKey(ctx, key)
	}
	return r.client.(*redis.Client), nil
}

// classify maps an error to an outcome by cause. Only errors that prove the
// command was not sent, or did not run, are Unavailable; an error after the
// command may have reached Redis is Indeterminate.
func (r *Redis) classify(err error) Outcome {
	cause, o := classifyRedisError(err)
	r.m.errors.WithLabelValues(cause).Inc()
	return o
}

func classifyRedisError(err error) (string, Outcome) {
	var opErr *net.OpError
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted):
		return "pool", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.Is(err, redis.ErrClosed):
		return "closed", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.Is(err, errNotSent):
		return "not_sent", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.Is(err, errCircuitOpen):
		return "circuit_open", Unavailable{Category: CircuitOpen, Err: err}
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return "dial", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.As(err, &rerr):
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return "wrongtype", Incompatible{Reason: StateUnreadable, Err: err}
		}
		// Error replies that refuse a command before it runs.
		if cause := refusal(err); cause != "" {
			return cause, Unavailable{Category: UnavailableBeforeSend, Err: err}
		}
		// A refusal of a call inside the script: the script may have run
		// in part, so the outcome stays Indeterminate, but the metric
		// names the cause an operator has to fix.
		if cause := scriptRefusal(rerr.Error()); cause != "" {
			return cause, Indeterminate{Err: err}
		}
		return "script", Indeterminate{Err: err}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "deadline", Indeterminate{Err: err}
	case isTimeout(err):
		return "timeout", Indeterminate{Err: err}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "connection_lost", Indeterminate{Err: err}
	}
	return "other", Indeterminate{Err: err}
}

// refusals are the error replies that prove a command did not run, each
// recognised by go-redis's own predicate where it has one. NOSCRIPT, BUSY
// and MISCONF have none, so those are matched by their reply code.
var refusals = []struct {
	cause string
	is    func(error) bool
}{
	{"noscript", replyCode("NOSCRIPT")},
	{"noperm", redis.IsPermissionError},
	{"auth", redis.IsAuthError},
	{"loading", redis.IsLoadingError},
	{"masterdown", redis.IsMasterDownError},
	{"readonly", redis.IsReadOnlyError},
	{"clusterdown", redis.IsClusterDownError},
	{"moved", func(err error) bool { _, ok := redis.IsMovedError(err); return ok }},
	{"ask", func(err error) bool { _, ok := redis.IsAskError(err); return ok }},
	{"tryagain", redis.IsTryAgainError},
	{"oom", redis.IsOOMError},
	{"noreplicas", redis.IsNoReplicasError},
	{"maxclients", redis.IsMaxClientsError},
	{"busy", replyCode("BUSY")},
	{"misconf", replyCode("MISCONF")},
}

func replyCode(code string) func(error) bool {
	return func(err error) bool { return redis.HasErrorPrefix(err, code+" ") }
}

// embeddedReply is an error reply found inside a script's error, for the
// refusal predicates.
type embeddedReply string

func (e embeddedReply) Error() string { return string(e) }
func (embeddedReply) RedisError()     {}

// scriptRefusal is the cause of a refusal that a call inside a script met.
// Redis 6 wraps the call's reply in the script's: "ERR Error running script
// (call to f_<sha>): @user_script:1: @user_script: 1: -NOAUTH
// Authentication required."; Redis 7 says an ACL refusal in words: "ERR
// The user executing the script can't run this command or subcommand
// script: <sha>, on @user_script:1." Neither has a typed error in go-redis.
func scriptRefusal(msg string) string {
	if !strings.Contains(msg, "script") {
		return ""
	}
	if i := strings.LastIndex(msg, ": -"); i >= 0 {
		if cause := refusal(embeddedReply(msg[i+3:])); cause != "" {
			return cause
		}
	}
	switch {
	case strings.Contains(msg, "can't run this command"), strings.Contains(msg, "no permissions"),
		strings.Contains(msg, "can't access at least one of the keys"):
		return "noperm"
	case strings.Contains(msg, "Authentication required"):
		return "auth"
	}
	return ""
}

func refusal(err error) string {
	for _, r := range refusals {
		if r.is(err) {
			return r.cause
		}
	}
	return ""
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ParseRedisMode maps a configuration name to a RedisMode.
func ParseRedisMode(s string) (RedisMode, bool) {
	switch m := RedisMode(s); m {
	case RedisStandalone, RedisSentinel, RedisCluster:
		return m, true
	}
	return "", false
}
