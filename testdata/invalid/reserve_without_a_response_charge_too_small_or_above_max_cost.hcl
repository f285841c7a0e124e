policy "calls" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
  reserve   = 1
}

policy "calls-too" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
  reserve   = 10
}

policy "failures" {
  algorithm      = "fixed-window"
  limit          = 5
  window         = "15m"
  count_statuses = [401, 403]
  reserve        = 0
}

policy "usage" {
  algorithm     = "token-bucket"
  capacity      = 100000
  refill_tokens = 1000
  refill_period = "1s"
  cost_header   = "X-Usage-Cost"
  max_cost      = 500
  reserve       = 600
}
