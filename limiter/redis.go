package limiter

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/internal/option"
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
	// write and one read, as one EVALSHA whose reply carries each decision
	// (in a Cluster, one for the decisions over the same keys).
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

// Validate reports every problem of o, each a *option.Error naming the
// field as a redis block does ("addrs", "addrs[1]", "master_name", "db",
// "tls_ca_file"),
// joined. It reads no file: tls_ca_file is read by NewRedis.
func (o RedisOptions) Validate() error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) {
		errs = append(errs, &option.Error{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	if len(o.Addrs) == 0 {
		problem("addrs", "No redis addresses", "redis.addrs needs at least one host:port.")
	}
	for i, a := range o.Addrs {
		if !hostPort(a) {
			problem(fmt.Sprintf("addrs[%d]", i), "Invalid redis address", "%q must be host:port.", a)
		}
	}
	switch {
	case o.Mode == RedisSentinel && o.MasterName == "":
		problem("master_name", "Missing required argument", "Sentinel mode needs master_name.")
	case o.Mode != RedisSentinel && o.MasterName != "":
		problem("master_name", "Argument not valid here", "master_name applies to sentinel mode only.")
	}
	if o.DB < 0 {
		problem("db", "Value too small", "db must be at least 0.")
	}
	if o.TLSCAFile != "" && !o.TLS {
		problem("tls_ca_file", "Argument not valid here", "tls_ca_file needs tls = true.")
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		// A "{}" would make Redis hash whole keys, and a subject's keys
		// would leave its slot.
		problem("key_prefix", "Invalid key prefix", "key_prefix %q holds a brace: the hash tags that keep each subject's keys on one Cluster slot are the gateway's to set.", o.KeyPrefix)
	}
	return errors.Join(errs...)
}

// hostPort reports whether s is a host, a colon and a port number.
func hostPort(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || s[0] == ':' {
		return false
	}
	port, err := strconv.Atoi(s[i+1:])
	return err == nil && port >= 0 && port <= 65535
}

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
	// leaseScript releases and renews leases (lua.Lease); releases runs
	// the releases and give-backs queued in the background
	// (redis_background.go), which Close waits for.
	leaseScript *script
	// penaltyScript keeps the penalties' hash (lua.Penalties).
	penaltyScript *script
	releases      sync.WaitGroup
	background    backgroundCalls
	// budget holds this instance's leases of budget (Policy.Lease).
	budget  *budgetLeases
	denials *denials // nil: off
	// penalties are the penalties in force this instance knows of
	// (redis_penalties.go).
	penalties penaltyBook
	// instance names this backend in the penalties it publishes, so that
	// it skips its own (penaltyMessage).
	instance string
	// resets forgets remembered denials of the subjects other instances
	// reset (redis_resets.go); nil without denials.
	resets *resetSubscription

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
//	    +zadd +zrem +zremrangebyscore +zcard +pttl
//	    +lrange +publish +subscribe &rl:resets
//
// (the zset commands for concurrency policies only; +lrange and +publish
// for the admin API's resets, +subscribe and the channel for hearing of
// other instances' resets).

// NewRedis connects, checks the topology and loads the scripts. It fails
// rather than start a backend that would deny or fail every request.
func NewRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if err := errors.Join(opts.Validate(), opts.Breaker.Validate()); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
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
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Redis{mode: opts.Mode, prefix: opts.KeyPrefix, clock: opts.Clock,
		script:        &script{name: "ratelimit", src: lua.Script, sha: redis.NewScript(lua.Script).Hash()},
		leaseScript:   &script{name: "lease", src: lua.Lease, sha: redis.NewScript(lua.Lease).Hash()},
		penaltyScript: &script{name: "penalties", src: lua.Penalties, sha: redis.NewScript(lua.Penalties).Hash()},
		batching:      !opts.DisableBatching, breakers: opts.Breaker, logger: opts.Logger,
		loading: make(chan struct{}, 1), budget: newBudgetLeases(), instance: rand.Text()}
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
		c := redis.NewClient(uo.Simple())
		r.markConns(c)
		r.client = c
	case RedisSentinel:
		c := redis.NewFailoverClient(uo.Failover())
		r.markConns(c)
		r.client = c
	case RedisCluster:
		r.cluster = redis.NewClusterClient(uo.Cluster())
		r.cluster.OnNewNode(func(c *redis.Client) {
			r.markConns(c)
			r.clusterNodes.Store(c.Options().Addr, c)
		})
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
	r.subscribeResets()
	go r.sweepBudgetLeases()
	r.startBackground()
	return r, nil
}

// Close gives the unused units of its leases of budget back and waits
// for the releases in flight, stops connecting and the batchers, then
// closes the client.
func (r *Redis) Close() error {
	close(r.budget.stop)
	<-r.budget.done
	r.releases.Wait()
	close(r.background.stop)
	if r.stopConnect != nil {
		close(r.stopConnect)
		<-r.connectDone
	}
	close(r.stopWatch)
	<-r.watchDone
	r.stopResets()
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

// withDeadline bounds ctx by deadline, unless it is zero, without a timer
// (see deadlineCtx). bounded is the context it made, nil when it returns
// ctx as it was.
func withDeadline(ctx context.Context, deadline time.Time) (_ context.Context, bounded *deadlineCtx) {
	if deadline.IsZero() {
		return ctx, nil
	}
	if d, ok := ctx.Deadline(); ok && !deadline.Before(d) {
		return ctx, nil
	}
	c := deadlines.Get().(*deadlineCtx)
	c.Context, c.deadline = ctx, deadline
	return c, c
}

// deadlines holds the deadlineCtx released for reuse.
var deadlines = sync.Pool{New: func() any { return new(deadlineCtx) }}

// release gives c, made by withDeadline, to the next one; nil is left.
// Only a caller that read the reply to every call made under c may
// release it: a call that stopped waiting may still be in a batch, whose
// worker reads its context (batcher).
func (c *deadlineCtx) release() {
	if c != nil {
		*c = deadlineCtx{}
		deadlines.Put(c)
	}
}

// deadlineCtx is a context bounded by a deadline that no timer enforces:
// a decision's. Deadline reports it, so go-redis sets it on the socket for
// every write and read (ContextTimeoutEnabled) and the dialer keeps to it;
// Err reports DeadlineExceeded once it has passed. Done is the parent's
// alone: the one wait that must end at the deadline itself, the caller's
// for its batch (batcher.evalSha), has a timer of its own, and the rarer
// waits (a script load, see timed) take one when they start.
// context.WithDeadline would cost every decision a timer, a cancel
// function and a place among the request context's children.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// timed is ctx with its deadline enforced by a timer, for a wait on
// ctx.Done().
func timed(ctx context.Context) (context.Context, context.CancelFunc) {
	if c, ok := ctx.(*deadlineCtx); ok {
		return context.WithDeadline(c.Context, c.deadline)
	}
	return ctx, func() {}
}

// Evaluate decides one request, in one script call over the keys of all
// its policies (one hash tag, one slot). A denial the instance remembers
// for the same policies, subject and cost answers without Redis; a lost
// reply is retried once under the same evaluation ID when the first policy
// de-duplicates.
func (r *Redis) Evaluate(ctx context.Context, req Request) Outcome {
	if req.settles != nil {
		return req.settles.settle(ctx, req)
	}
	if o := admit(ctx, req); o != nil {
		return o
	}
	if req.Phase == Admission && req.Policies.leased {
		return r.evaluateLeased(ctx, req)
	}
	var starts []int64
	if req.Phase == Admission && req.Policies.chargedByResponse {
		starts = make([]int64, req.Policies.Len())
	}
	o := r.evaluate(ctx, req, nil, starts)
	return admission(r, req, o, starts)
}

// settled does nothing: no gateway evicts a key from Redis; it expires,
// and the reserves charged to it with it.
func (*Redis) settled(Request) {}

// returnReserve gives req.Cost back to req's one policy in the state
// that starts at start, while it still holds it: one script call, sent
// once (a give-back that may not have run leaves the reserve charged).
func (r *Redis) returnReserve(ctx context.Context, req Request, start int64) Outcome {
	if o := admit(ctx, req); o != nil {
		return o
	}
	ctx, bounded := withDeadline(ctx, req.Deadline)
	cmd := r.command(req.Policies, req.Subject, scriptCall{cost: req.Cost, phase: returningLease, leaseStart: start})
	o := r.decide(ctx, req.Policies, cmd, nil)
	if _, replied := o.(Evaluated); replied {
		releaseCommand(cmd)
		bounded.release()
	}
	return o
}

// evaluate decides req in one script call, which with call also asks for
// leases of budget (budget_lease.go); starts, when not nil, receives each
// policy's state start (a lease of budget, a reserve).
func (r *Redis) evaluate(ctx context.Context, req Request, call *budgetCall, starts []int64) Outcome {
	set := req.Policies
	dk := denialKey{set: set, subject: req.Subject, cost: req.Cost}
	sent := r.now(set.clockPolicy())
	// A settlement never denies: a remembered denial is no answer to it.
	denials := r.denials
	if req.Phase == Settlement {
		denials = nil
	}
	if denials != nil {
		if e, ok := denials.get(dk, sent); ok {
			r.m.cached.Inc()
			return e
		}
	}
	ctx, bounded := withDeadline(ctx, req.Deadline)
	dedup := set.Dedup().Enabled && req.EvaluationID != ""
	c := scriptCall{cost: req.Cost, phase: req.Phase, mayDelay: req.MayDelay, budget: call}
	if dedup {
		c.rem = remembering{on: true, look: !req.NewID}
	}
	// The ID of the record, lease or reservation, after every policy's.
	if dedup || set.holdsLeases || req.MayDelay && set.delays {
		c.id = req.EvaluationID
	}
	cmd := r.command(set, req.Subject, c)
	o := r.decide(ctx, set, cmd, starts)
	if _, ambiguous := o.(Indeterminate); ambiguous && dedup && ctx.Err() == nil {
		// The first call may have been charged; the same evaluation ID makes
		// a repeat return that first result instead of charging again. (A
		// command of its own: the first call's may still be with the
		// batcher.)
		c.rem.look = true
		o = r.decide(ctx, set, r.command(set, req.Subject, c), starts)
	} else if _, replied := o.(Evaluated); replied {
		// A reply was read for every try: no batch holds cmd or ctx any
		// more. A call that stopped waiting leaves both to the collector.
		releaseCommand(cmd)
		bounded.release()
	}
	// A request that could not be held is refused later than one that
	// could: its denial is no answer to the next.
	if e, ok := o.(Evaluated); ok && denials != nil && (req.MayDelay || !set.delays) {
		denials.put(dk, e, sent)
	}
	return o
}

// now is the clock the policy's decisions are placed by, as far as this
// instance can read it: the injected clock for ClockGateway, and for
// ClockBackend the local one, which runs at Redis's rate.
func (r *Redis) now(p *Policy) time.Time { return policyNow(r.clock, p) }

func policyNow(clock Clock, p *Policy) time.Time {
	if p.Clock == ClockGateway {
		return clock.Now()
	}
	return time.Now()
}

// decide sends cmd, an EVALSHA of the rate-limit script over set, and
// reads its reply; starts, when not nil, receives each policy's state
// start when the reply carries them (a lease of budget asked for).
func (r *Redis) decide(ctx context.Context, set *PolicySet, cmd []any, starts []int64) Outcome {
	reply, err := r.evalsha(ctx, cmd)
	if err != nil {
		return r.classify(err)
	}
	return decodeReply(set, reply, r.clock, starts)
}

// ParseRedisMode maps a configuration name to a RedisMode; an unknown name
// is an *option.Error of the field mode.
func ParseRedisMode(s string) (RedisMode, error) {
	modes := []RedisMode{RedisStandalone, RedisCluster, RedisSentinel}
	if m := RedisMode(s); slices.Contains(modes, m) {
		return m, nil
	}
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = string(m)
	}
	return "", option.Unknown("mode", "Unknown redis mode", s, names)
}
