package subject

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// KeySet is where the jwt source finds the public key a token names: a
// set read once (ParseKeySet, for jwks_file) or one fetched from the
// identity provider (RemoteKeys, for jwks_url). The two are the only
// implementations.
type KeySet interface {
	// lookup returns the key for a token's kid and alg, and the
	// generation of the set it was found in. A set that changes gets a new
	// generation, and tokens verified under an older one are verified
	// again.
	lookup(ctx context.Context, kid, alg string) (*publicKey, uint64, error)
	// generation is the current set's.
	generation() uint64
}

// errUnknownKey: no key of the set has the token's kid (or, for a token
// without one, exactly one key fits its algorithm).
var errUnknownKey = errors.New("no key of the set fits the token")

// ErrKeysUnavailable is what Resolve returns when a token could only be
// checked against a jwks_url key set that has never been fetched: the
// gateway cannot decide, and says so rather than call the token invalid.
var ErrKeysUnavailable = errors.New("subject: the JWT key set has not been fetched yet")

// StaticKeys is a key set read from a file; SIGHUP reads the file again
// into a new set.
type StaticKeys struct {
	snapshot *keySnapshot
}

// ParseKeySet reads a JWK Set (RFC 7517) of public signing keys.
func ParseKeySet(src []byte) (*StaticKeys, error) {
	s, err := parseJWKS(src)
	if err != nil {
		return nil, err
	}
	return &StaticKeys{snapshot: s}, nil
}

func (s *StaticKeys) generation() uint64 { return 0 }

func (s *StaticKeys) lookup(_ context.Context, kid, alg string) (*publicKey, uint64, error) {
	if k, ok := s.snapshot.find(kid, alg); ok {
		return k, 0, nil
	}
	return nil, 0, errUnknownKey
}

// RemoteKeysOptions configures RemoteKeys.
type RemoteKeysOptions struct {
	URL string
	// Client fetches the set; nil uses a client of its own. Timeout bounds
	// each fetch either way, and a redirect is refused either way: the
	// URL was checked where it was configured, an address it redirects to
	// was not.
	Client *http.Client
	// Timeout bounds one fetch. Default 5s.
	Timeout time.Duration
	// RefreshInterval is the least time between two fetches that a token
	// with an unknown key ID causes. Default 10s.
	RefreshInterval time.Duration
	// MaxAge is how long a fetched set is used before it is fetched again
	// in the background, so that a key the provider withdrew stops
	// verifying. Default 15m.
	MaxAge time.Duration
	Now    func() time.Time // default time.Now
	Logger *slog.Logger     // fetch failures; nil discards
	// Metrics count the fetches; nil counts none. A new RemoteKeys sets
	// the last success time back to 0: it has fetched nothing yet.
	Metrics *JWKSMetrics
}

// errRedirect: the key set's URL answered with a redirect.
var errRedirect = errors.New("jwks_url answered with a redirect, which is refused: set jwks_url to the address that serves the key set")

func refuseRedirect(*http.Request, []*http.Request) error { return errRedirect }

// maxJWKSBytes bounds a key set: a provider's set is a few kilobytes.
const maxJWKSBytes = 1 << 20

// RemoteKeys is a key set fetched from a URL and cached. A token whose
// key ID the cached set does not know causes a fetch, at most one per
// RefreshInterval however many such tokens arrive, and the requests that
// arrive while it runs wait for it (within their own context) rather than
// fetch again. A fetch that fails keeps the last good set. It holds no
// goroutine of its own: a set older than MaxAge is fetched again by a
// short-lived one, bounded by Timeout, that the next lookup starts.
type RemoteKeys struct {
	opts        RemoteKeysOptions
	current     atomic.Pointer[remoteSnapshot]
	lastAttempt atomic.Int64 // UnixNano of the last fetch started; 0: none
	inFlight    atomic.Bool  // set before lastAttempt, cleared after current
	fetching    chan struct{}
}

type remoteSnapshot struct {
	keys       *keySnapshot
	raw        []byte
	generation uint64
	fetched    time.Time
}

// NewRemoteKeys returns a key set for opts.URL that has fetched nothing
// yet: call Refresh to fetch it.
func NewRemoteKeys(opts RemoteKeysOptions) (*RemoteKeys, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("subject: jwks_url %q is not an http(s) URL", opts.URL)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = 10 * time.Second
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 15 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	client := &http.Client{}
	if opts.Client != nil {
		*client = *opts.Client
	}
	client.CheckRedirect = refuseRedirect
	opts.Client = client
	if opts.Metrics != nil {
		opts.Metrics.lastSuccess.Set(0)
	}
	return &RemoteKeys{opts: opts, fetching: make(chan struct{}, 1)}, nil
}

// URL is the address the set is fetched from.
func (r *RemoteKeys) URL() string { return r.opts.URL }

// Refresh fetches the set now, whatever the interval, waiting for a fetch
// already running; on failure the last good set stays and the error says
// why.
func (r *RemoteKeys) Refresh(ctx context.Context) error {
	select {
	case r.fetching <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.fetching }()
	return r.fetch(ctx)
}

func (r *RemoteKeys) lookup(ctx context.Context, kid, alg string) (*publicKey, uint64, error) {
	snap := r.current.Load()
	if snap != nil {
		if k, ok := snap.keys.find(kid, alg); ok {
			if r.opts.Now().Sub(snap.fetched) > r.opts.MaxAge {
				r.refreshInBackground()
			}
			return k, snap.generation, nil
		}
	}
	// A fetch that is running, or that ran while this request waited,
	// answers it too; only when none did does this request fetch.
	if r.mayFetch() || r.inFlight.Load() {
		select {
		case r.fetching <- struct{}{}:
			if r.current.Load() == snap && r.mayFetch() {
				r.fetch(ctx)
			}
			<-r.fetching
		case <-ctx.Done():
		}
	}
	snap = r.current.Load()
	if snap != nil {
		if k, ok := snap.keys.find(kid, alg); ok {
			return k, snap.generation, nil
		}
	}
	return nil, 0, r.missing(snap)
}

func (r *RemoteKeys) generation() uint64 {
	snap := r.current.Load()
	if snap == nil {
		return 0
	}
	if r.opts.Now().Sub(snap.fetched) > r.opts.MaxAge {
		r.refreshInBackground()
	}
	return snap.generation
}

func (r *RemoteKeys) missing(snap *remoteSnapshot) error {
	if snap == nil {
		return ErrKeysUnavailable
	}
	return errUnknownKey
}

func (r *RemoteKeys) mayFetch() bool {
	last := r.lastAttempt.Load()
	return last == 0 || r.opts.Now().Sub(time.Unix(0, last)) >= r.opts.RefreshInterval
}

func (r *RemoteKeys) refreshInBackground() {
	if !r.mayFetch() {
		return
	}
	select {
	case r.fetching <- struct{}{}:
	default:
		return // a fetch is running
	}
	go func() {
		defer func() { <-r.fetching }()
		if r.mayFetch() {
			r.fetch(context.Background())
		}
	}()
}

// fetch gets the set once; the caller holds r.fetching. The fetch is not
// cut short when the request that caused it goes away: others wait on it.
func (r *RemoteKeys) fetch(ctx context.Context) error {
	r.inFlight.Store(true)
	defer r.inFlight.Store(false)
	r.lastAttempt.Store(r.opts.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.Timeout)
	defer cancel()
	err := r.get(ctx)
	if m := r.opts.Metrics; m != nil {
		if err != nil {
			m.failed.Inc()
		} else {
			m.ok.Inc()
			m.lastSuccess.Set(float64(r.current.Load().fetched.UnixNano()) / 1e9)
		}
	}
	if err != nil {
		r.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "JWT key set fetch failed; the last good set stays",
			slog.String("jwks_url", r.opts.URL), slog.String("error", err.Error()))
	}
	return err
}

func (r *RemoteKeys) get(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.opts.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	res, err := r.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("jwks_url answered %s", res.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxJWKSBytes+1))
	if err != nil {
		return fmt.Errorf("read jwks_url: %w", err)
	}
	if len(raw) > maxJWKSBytes {
		return fmt.Errorf("jwks_url sent more than %d bytes", maxJWKSBytes)
	}
	now := r.opts.Now()
	old := r.current.Load()
	if old != nil && bytes.Equal(old.raw, raw) {
		// The same set: tokens verified under it stay verified.
		r.current.Store(&remoteSnapshot{keys: old.keys, raw: old.raw, generation: old.generation, fetched: now})
		return nil
	}
	keys, err := parseJWKS(raw)
	if err != nil {
		return fmt.Errorf("jwks_url: %w", err)
	}
	next := &remoteSnapshot{keys: keys, raw: raw, generation: 1, fetched: now}
	if old != nil {
		next.generation = old.generation + 1
	}
	r.current.Store(next)
	return nil
}
