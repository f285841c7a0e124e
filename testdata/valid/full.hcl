# Every block of the schema, valid. The tls block waits for the HTTPS
# listener, so this file is for `validate` only.
listen {
  http                = "127.0.0.1:8080"
  admin               = "127.0.0.1:9901"
  shutdown_timeout    = "5s"
  read_header_timeout = "5s"
  idle_timeout        = "1m"
  max_header_bytes    = 32768
}

limiter {
  backend             = "redis"
  deadline            = "750ms"
  failure_retry_after = "2s"
  redis {
    mode        = "sentinel"
    addrs       = ["127.0.0.1:26379", "127.0.0.1:26380"]
    master_name = "mymaster"
    username    = "gateway"
    password    = env("GATEWAY_TEST_REDIS_PASSWORD", "")
    tls         = false
    key_prefix  = "rl:"
  }
  breaker {
    failures = 5
    cooldown = "2s"
  }
  fallback {
    instances = 3
  }
}

subject {
  trusted_proxies  = ["127.0.0.1/32", "10.0.0.0/8", "::1"]
  forwarded_header = "X-Forwarded-For"
  principal_header = "X-Auth-Principal"
  api_key_header   = "X-API-Key"
  api_keys_file    = "../api-keys.txt"
  plan_header      = "X-Auth-Plan"
  ipv6_prefix      = 56
}

pseudonym {
  version = 2
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
  key "2" { secret = file("../secrets/fake-hmac-v2.txt") }
}

log {
  level  = "debug"
  access = false
}

policy "per-client" {
  algorithm            = "fixed-window"
  limit                = 100
  window               = "1m"
  revision             = 3
  max_cost             = 5
  cleanup_grace        = "10s"
  max_clock_regression = "1s"
  clock                = "gateway"
}

policy "smooth" {
  algorithm = "sliding-counter"
  limit     = 50
  window    = "10s"
  dedup {
    ttl         = "2s"
    max_entries = 64
    max_bytes   = 8192
  }
}

policy "burst" {
  algorithm     = "token-bucket"
  capacity      = 20
  refill_tokens = 5
  refill_period = "1s"
  dedup {
    enabled = false
  }
}

policy "gold-monthly" {
  algorithm = "fixed-window"
  limit     = 100000
  calendar  = "month"
  timezone  = "Europe/Berlin"
}

upstream "legacy-orders" {
  targets             = ["http://127.0.0.1:9000", "http://127.0.0.1:9001/"]
  balance             = "least_requests"
  connect_timeout     = "2s"
  response_timeout    = "30s"
  max_fails           = 3
  fail_timeout        = "10s"
  eject_on_timeout    = true
  max_ejected_percent = 34
  health {
    path     = "/healthz"
    interval = "5s"
    timeout  = "1s"
  }
}

route "orders.read" {
  host     = "api.example.com"
  path     = "/orders"
  methods  = ["GET", "HEAD"]
  upstream = "legacy-orders"
  policy   = "per-client"
  subject  = ["principal", "api_key", "client_ip"]
  cost     = 5
}

route "orders.write" {
  host     = "api.example.com"
  path     = "/orders"
  methods  = ["POST"]
  upstream = "https://orders.internal:8443/api"
  policy   = "smooth"
  subject  = ["api_key", "client_ip"]
}

route "orders.legacy" {
  path           = "/api/v1/orders"
  upstream       = "http://127.0.0.1:9000"
  rewrite_prefix = "/cgi-bin/orders"
  host_header    = "orders.internal"
  policy         = "per-client"
  plans          = { gold = ["burst", "gold-monthly"], partner = ["smooth", "burst"] }
  request_headers {
    set    = { "X-Gateway" = "edge" }
    remove = ["X-Debug"]
  }
  response_headers {
    set    = { "Cache-Control" = "no-store" }
    remove = ["Server", "X-Powered-By"]
  }
}

route "health" {
  path     = "/health"
  upstream = "http://127.0.0.1:9000"
}

route "default" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  policy   = "burst"
}
