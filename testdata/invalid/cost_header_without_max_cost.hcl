policy "usage" {
  algorithm     = "token-bucket"
  capacity      = 100000
  refill_tokens = 1000
  refill_period = "1s"
  cost_header   = "X-Usage-Cost"
}

route "completions" {
  path     = "/v1/completions"
  upstream = "http://127.0.0.1:9000"
  policy   = "usage"
}
