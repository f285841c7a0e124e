policy "failed-logins" {
  algorithm      = "fixed-window"
  limit          = 5
  window         = "15m"
  count_statuses = [401, 700]
}

policy "usage" {
  algorithm   = "token-bucket"
  capacity    = 100
  refill_tokens = 10
  refill_period = "1s"
  cost_header = "X Usage Cost"
  max_cost    = 100
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policies = ["failed-logins", "usage"]
}
