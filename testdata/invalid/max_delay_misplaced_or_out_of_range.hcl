limiter {
  max_delayed = 0
}

policy "sliding" {
  algorithm = "sliding-counter"
  limit     = 10
  window    = "1s"
  max_delay = "500ms"
}

policy "too-long" {
  algorithm     = "token-bucket"
  capacity      = 10
  refill_tokens = 10
  refill_period = "1s"
  max_delay     = "11s"
}

policy "failed-logins" {
  algorithm      = "fixed-window"
  limit          = 5
  window         = "15m"
  count_statuses = [401]
  max_delay      = "1s"
}

route "api" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policies = ["sliding", "too-long", "failed-logins"]
}
