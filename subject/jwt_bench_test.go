package subject_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// BenchmarkJWT measures what the jwt source costs a request: a token seen
// before (the cache) and a token seen for the first time (a signature
// check), for RS256 and ES256.
func BenchmarkJWT(b *testing.B) {
	for _, newKey := range []func(testing.TB, string) *jwttest.Key{jwttest.RSA, jwttest.EC} {
		k := newKey(b, "k1")
		exp := time.Now().Add(time.Hour)
		for _, cached := range []bool{true, false} {
			name := fmt.Sprintf("%s/cached=%t", k.Alg, cached)
			b.Run(name, func(b *testing.B) {
				o := jwtOptions(staticKeys(b, k), time.Now)
				// Uncached: more distinct tokens than the cache has slots.
				tokens := 1
				if !cached {
					o.CacheEntries, tokens = 1, 64
				}
				r := jwtResolver(b, o)
				reqs := make([]*http.Request, tokens)
				for i := range reqs {
					reqs[i] = bearer(k.Sign(b, jwttest.Claims(fmt.Sprint("user-", i), exp)))
				}
				sources := []subject.Kind{subject.JWT}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					if _, err := r.Resolve(reqs[i%tokens], subject.Query{Sources: sources, OperationID: "orders.read"}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
