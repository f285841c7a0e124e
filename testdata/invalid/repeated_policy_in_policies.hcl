policy "per-second" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1s"
}

policy "per-day" {
  algorithm = "fixed-window"
  limit     = 10000
  window    = "24h"
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policies = ["per-second", "per-day", "per-second"]
}
