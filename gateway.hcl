# Edge gateway example: runs as it is, with the in-process memory limiter.
#   go run . -config gateway.hcl
# Put your legacy backend on 127.0.0.1:9000 (or change the upstreams below).

listen {
  http             = ":8080"
  admin            = "127.0.0.1:9901" # /metrics, /healthz, /readyz
  shutdown_timeout = "15s"
}

limiter {
  backend             = "memory"
  deadline            = "750ms"
  failure_retry_after = "1s"
}

subject {
  # Forwarding and principal headers are believed only from these peers.
  # Add your load balancer here when the gateway sits behind one.
  trusted_proxies  = []
  forwarded_header = "X-Forwarded-For"
  api_key_header   = "X-API-Key"
  ipv6_prefix      = 64
}

# Without a pseudonym block the gateway signs pseudonyms with a random key
# that lives as long as the process: fine for one instance. Instances that
# share Redis need the same keys, for example:
#
# pseudonym {
#   version = 1
#   key "1" { secret = env("GATEWAY_HMAC_V1") }
# }

policy "per-client" {
  algorithm            = "fixed-window"
  limit                = 5
  window               = "1m"
  revision             = 1
  max_cost             = 1
  cleanup_grace        = "5s"
  max_clock_regression = "2s"
}

policy "burst" {
  algorithm     = "token-bucket"
  capacity      = 20
  refill_tokens = 5
  refill_period = "1s"
}

# Several instances of one backend behind one name: a route's upstream may
# name an upstream block instead of a URL (docs/configuration.md, upstream).
#
# upstream "legacy-orders" {
#   targets = ["http://10.0.0.11:9000", "http://10.0.0.12:9000"]
#   health { path = "/healthz" }
# }

# A legacy backend often folds paths: IIS matches /ORDERS as /orders, Rails
# and older Spring serve /orders.json as /orders. These two options make
# the gateway fold them the same way, so that no spelling of /orders
# escapes its limit through the default route; the path still goes
# upstream as the client spelled it. Drop them for a backend that matches
# paths exactly.
route "orders.read" {
  path              = "/orders"
  methods           = ["GET", "HEAD"]
  upstream          = "http://127.0.0.1:9000"
  policy            = "per-client"
  subject           = ["client_ip"]
  case_insensitive  = true
  ignore_extensions = [".json", ".xml"]
}

route "orders.write" {
  path              = "/orders"
  methods           = ["POST", "PUT", "PATCH", "DELETE"]
  upstream          = "http://127.0.0.1:9000"
  policy            = "burst"
  subject           = ["client_ip"]
  case_insensitive  = true
  ignore_extensions = [".json", ".xml"]
}

route "default" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policy   = "burst"
}
