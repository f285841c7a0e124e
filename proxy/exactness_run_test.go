package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// exactSpec is a run of exactRun: clients sending through gateways that
// share servers (a Redis deployment) until every subject met its limit.
type exactSpec struct {
	gateways   []*gateway
	servers    []*redis.Client
	up         *upstream
	clients    int
	principals []string // none: every client is 127.0.0.1
	limit      int
	window     time.Duration
	run        time.Duration
	send       sender
}

// exactRun runs spec's clients and checks the history against a fixed
// window of spec.limit: the bounds of exactness, that the clients met the
// limit in the windows they covered, and, with Redis healthy, exactly the
// limit admitted in every window that denied.
func exactRun(t *testing.T, spec exactSpec) {
	t.Helper()
	gateways, servers, up, clients, principals := spec.gateways, spec.servers, spec.up, spec.clients, spec.principals
	limit, window, run := spec.limit, spec.window, spec.run
	offset := measureOffset(t, servers...)
	started := time.Now()
	l := startLoadWith(t, gateways, clients, principals, spec.send)
	time.Sleep(run)
	// On a machine too busy for the clients to meet the limit in
	// the first windows, the run goes on (up to 15s more) until
	// each subject was denied in a window that began after the
	// start, and the window after that one has (about) ended.
	subjects := principals
	if len(subjects) == 0 {
		subjects = []string{"127.0.0.1"}
	}
	for until := time.Now().Add(15 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
		met := true
		for _, s := range subjects {
			at, ok := l.firstDeniedAfter(s, started.Add(window+offset.max-offset.min))
			met = met && ok && time.Since(at) > 2*window
		}
		if met {
			break
		}
	}
	stopped := time.Now()
	history := l.finish(t)
	offset = offset.hull(measureOffset(t, servers...))

	e := exactness{limit: limit, window: window, offset: offset, denialSlack: rememberedDenialSlack}
	tallies := e.verify(t, history)
	// The windows the clients covered from end to end. How many
	// requests reach a window is the machine's business: on a busy
	// one (-race, two shared cores) a subject got fewer than 25 a
	// second, or the breaker opened on late replies. So the demand
	// each window met is counted, not assumed: a covered window
	// whose requests were all decided (no 503) and more than the
	// limit must have denied, and every subject must have met its
	// limit in some covered window, or the run proved nothing.
	first, last := e.windowOf(started.Add(offset.max))+1, e.windowOf(stopped.Add(offset.min))-1
	type demand struct{ inside, unknown int }
	demands := map[string]map[int64]*demand{}
	for _, d := range history {
		lo, hi := e.span(d.start, d.end)
		if demands[d.subject] == nil {
			demands[d.subject] = map[int64]*demand{}
		}
		for w := lo; w <= hi; w++ {
			if demands[d.subject][w] == nil {
				demands[d.subject][w] = &demand{}
			}
			if d.status == http.StatusServiceUnavailable {
				demands[d.subject][w].unknown++
			} else if lo == hi {
				demands[d.subject][w].inside++
			}
		}
	}
	for _, s := range subjects {
		saturatedSome := false
		for w := first; w <= last; w++ {
			denied := false
			for _, tl := range tallies {
				denied = denied || (tl.subject == s && tl.index == w && tl.denied > 0)
			}
			saturatedSome = saturatedSome || denied
			dm := demands[s][w]
			switch {
			case denied:
			case dm == nil:
				t.Errorf("%s: window %d, covered by the clients from end to end, saw no request", s, w)
			case dm.unknown == 0 && dm.inside > limit:
				t.Errorf("%s: window %d, covered by the clients from end to end, decided %d requests and denied nothing", s, w, dm.inside)
			default:
				t.Logf("%s: window %d met a demand of %d decided and %d 503s, and denied nothing", s, w, dm.inside, dm.unknown)
			}
		}
		if !saturatedSome && first <= last {
			t.Errorf("%s: no covered window denied: the clients never met the limit", s)
		}
	}
	n := statusCounts(history)
	forwarded := 0
	for _, d := range history {
		if d.status == http.StatusOK && !d.rls {
			forwarded++
		}
	}
	if up.count() != forwarded {
		t.Errorf("the upstream saw %d requests, the clients %d 200s over HTTP", up.count(), forwarded)
	}
	t.Logf("%d requests in %v: %d admitted, %d denied (429), %d unknown (503); clock offset [%v, %v]; windows %d..%d covered",
		len(history), stopped.Sub(started).Round(time.Millisecond), n[200], n[429], n[503], offset.min, offset.max, first, last)
	for _, tl := range tallies {
		t.Logf("%s %v", tl.subject, tl)
	}
	// What the bounds come to when Redis was healthy and every window
	// denied: exactly the limit in each.
	admitted, windows, denying := map[string]int{}, map[string]int{}, map[string]int{}
	for _, d := range history {
		if d.status == http.StatusOK {
			admitted[d.subject]++
		}
	}
	for _, tl := range tallies {
		windows[tl.subject]++
		if tl.denied > 0 {
			denying[tl.subject]++
		}
	}
	for _, s := range subjects {
		if n[503] == 0 && denying[s] == windows[s] && admitted[s] != limit*windows[s] {
			t.Errorf("%s: %d admitted in %d windows that all denied, want %d", s, admitted[s], windows[s], limit*windows[s])
		}
		t.Logf("%s: %d admitted in %d windows, %d of them denying", s, admitted[s], windows[s], denying[s])
	}
}
