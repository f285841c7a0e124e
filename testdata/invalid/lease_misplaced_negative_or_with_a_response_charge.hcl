policy "estimate" {
  algorithm = "sliding-counter"
  limit     = 100
  window    = "1m"
  lease     = 10
}

policy "in-flight" {
  algorithm = "concurrency"
  limit     = 10
  lease     = 2
}

policy "negative" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
  lease     = -5
}

policy "usage" {
  algorithm     = "token-bucket"
  capacity      = 1000
  refill_tokens = 10
  refill_period = "1s"
  cost_header   = "X-Usage-Cost"
  max_cost      = 100
  lease         = 50
}
