package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// passesToReturn is how many active checks in a row a target out of
// rotation must pass to come back: one could be luck.
const passesToReturn = 2

// healthChecks are the running active checks of one configuration: a
// goroutine per target of every pool with a health block. stop ends them
// and waits for them.
type healthChecks struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

func startHealthChecks(pools map[string]*pool) *healthChecks {
	ctx, cancel := context.WithCancel(context.Background())
	hc := &healthChecks{cancel: cancel}
	for _, p := range pools {
		if p.Health == nil {
			continue
		}
		client := &http.Client{
			Transport: p.transport,
			// A redirect answers the check; following it would check
			// another server.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		for _, m := range p.members {
			hc.done.Add(1)
			go func() {
				defer hc.done.Done()
				m.checkEvery(ctx, client)
			}()
		}
	}
	return hc
}

func (hc *healthChecks) stop() {
	hc.cancel()
	hc.done.Wait()
}

// checkEvery checks the target at once, then every interval, until ctx
// ends.
func (m *member) checkEvery(ctx context.Context, client *http.Client) {
	t := time.NewTicker(m.pool.Health.Interval)
	defer t.Stop()
	for {
		m.check(ctx, client)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check GETs the target's health path: a 2xx or 3xx within the timeout
// passes.
func (m *member) check(ctx context.Context, client *http.Client) {
	cctx, cancel := context.WithTimeout(ctx, m.pool.Health.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, m.checkURL, nil)
	if err != nil {
		return
	}
	req.Header.Set("User-Agent", "edge-gateway-health-check")
	res, err := client.Do(req)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
	}
	if ctx.Err() != nil {
		return // stopping: the check says nothing of the target
	}
	m.checked(err == nil && res.StatusCode >= 200 && res.StatusCode < 400, err, res)
}

func (m *member) checked(passed bool, err error, res *http.Response) {
	p := m.pool
	if !passed {
		m.passes.Store(0)
		if !m.down.Swap(true) {
			var reason slog.Attr
			if err != nil {
				reason = slog.String("error", err.Error())
			} else {
				reason = slog.Int("status", res.StatusCode)
			}
			p.logger.LogAttrs(context.Background(), slog.LevelWarn, "upstream target failed its health check",
				slog.String("pool", p.Name), slog.String("target", m.name), reason)
		}
		return
	}
	if m.passes.Add(1) < passesToReturn || (!m.down.Load() && m.ejectedUntil.Load() == 0) {
		return
	}
	out := !m.inRotation()
	m.ejectedUntil.Store(0)
	m.down.Store(false)
	if out {
		p.logger.LogAttrs(context.Background(), slog.LevelInfo, "upstream target back in rotation",
			slog.String("pool", p.Name), slog.String("target", m.name))
	}
}
