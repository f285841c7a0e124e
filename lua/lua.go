// Package lua holds the rate-limit scripts the Redis backend runs. A
// one-policy script is the shared prelude, the algorithms' common helper,
// one algorithm and the shared epilogue, and touches one subject's keys
// (KEYS[1] and, with de-duplication, two more under its hash tag). The
// several-policy script holds every algorithm and decides all of a route's
// policies in one call, over keys that share the subject's hash tag; so
// every script runs on Redis Cluster. prelude.lua documents the key layout,
// ARGV and the reply; multi.lua its own.
package lua

import _ "embed"

var (
	//go:embed prelude.lua
	prelude string
	//go:embed common.lua
	common string
	//go:embed epilogue.lua
	epilogue string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed sliding_counter.lua
	slidingCounter string
	//go:embed token_bucket.lua
	tokenBucket string
	//go:embed multi.lua
	multi string
)

// The scripts, whole.
var (
	FixedWindow    = prelude + common + fixedWindow + "local decide = fixed_window\n" + epilogue
	SlidingCounter = prelude + common + slidingCounter + "local decide = sliding_counter\n" + epilogue
	TokenBucket    = prelude + common + tokenBucket + "local decide = token_bucket\n" + epilogue
	// Multi decides several policies at once; see multi.lua.
	Multi = common + fixedWindow + slidingCounter + tokenBucket + multi
)
