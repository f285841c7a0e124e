policy "in-flight" {
  algorithm = "concurrency"
  limit     = 0
  lease_ttl = "500ms"
}

policy "long" {
  algorithm = "concurrency"
  limit     = 2
  lease_ttl = "2h"
}

policy "costly" {
  algorithm = "concurrency"
  limit     = 2
  max_cost  = 3
}

policy "windowed" {
  algorithm = "concurrency"
  limit     = 2
  window    = "1m"
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policies = ["in-flight", "long", "costly", "windowed"]
}
