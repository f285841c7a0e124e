package edge

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// drainIdleAfter is how long, during a drain, an HTTP/3 connection may go
// without a request in flight before the gateway closes it itself. A
// client is meant to close its connection once it has seen GOAWAY and has
// its answers; one that has gone away, or never does, would otherwise
// hold the drain until shutdown_timeout. The wait leaves time for the
// last response's lost packets to be sent again.
const drainIdleAfter = time.Second

// quicActivity knows, for each open HTTP/3 connection, how many requests
// it has in flight and since when it has had none.
type quicActivity struct {
	mu    sync.Mutex
	conns map[*connActivity]struct{}
}

type connActivity struct {
	conn     *quic.Conn
	inFlight atomic.Int64
	idleFrom atomic.Int64 // UnixNano: the connection's start or its last request's end
}

type activityKey struct{}

func newQUICActivity() *quicActivity {
	return &quicActivity{conns: map[*connActivity]struct{}{}}
}

// connContext is the http3.Server's ConnContext: it tracks c until it
// closes.
func (a *quicActivity) connContext(ctx context.Context, c *quic.Conn) context.Context {
	ca := &connActivity{conn: c}
	ca.idleFrom.Store(time.Now().UnixNano())
	a.mu.Lock()
	a.conns[ca] = struct{}{}
	a.mu.Unlock()
	context.AfterFunc(c.Context(), func() {
		a.mu.Lock()
		delete(a.conns, ca)
		a.mu.Unlock()
	})
	return context.WithValue(ctx, activityKey{}, ca)
}

// counting counts the requests next serves on their connection.
func (a *quicActivity) counting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ca, ok := r.Context().Value(activityKey{}).(*connActivity); ok {
			ca.inFlight.Add(1)
			defer func() {
				ca.idleFrom.Store(time.Now().UnixNano())
				ca.inFlight.Add(-1)
			}()
		}
		next.ServeHTTP(w, r)
	})
}

// closeIdle closes, with H3_NO_ERROR, every connection without a request
// in flight since drainIdleAfter before now.
func (a *quicActivity) closeIdle(now time.Time) {
	var idle []*quic.Conn
	a.mu.Lock()
	for ca := range a.conns {
		if ca.inFlight.Load() == 0 && now.Sub(time.Unix(0, ca.idleFrom.Load())) >= drainIdleAfter {
			idle = append(idle, ca.conn)
		}
	}
	a.mu.Unlock()
	for _, c := range idle {
		c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
}
