// Package lua holds the rate-limit scripts the Redis backend runs. Each
// script is the shared prelude, one algorithm's decide function and the
// shared epilogue; each touches exactly one key, KEYS[1], so every script
// runs on Redis Cluster. The prelude documents the key layout, ARGV and the
// reply.
package lua

import _ "embed"

var (
	//go:embed prelude.lua
	prelude string
	//go:embed epilogue.lua
	epilogue string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed sliding_counter.lua
	slidingCounter string
	//go:embed token_bucket.lua
	tokenBucket string
)

// The three scripts, whole.
var (
	FixedWindow    = prelude + fixedWindow + epilogue
	SlidingCounter = prelude + slidingCounter + epilogue
	TokenBucket    = prelude + tokenBucket + epilogue
)
