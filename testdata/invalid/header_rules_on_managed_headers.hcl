subject {
  trusted_proxies  = ["10.0.0.0/8"]
  principal_header = "X-Auth-Principal"
}

route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  request_headers {
    set    = { "x-auth-principal" = "admin", "Content-Length" = "0" }
    remove = ["X-API-Key", "Forwarded", "X-Real-IP", "Host"]
  }
  response_headers {
    set    = { "Retry-After" = "0" }
    remove = ["RateLimit", "RateLimit-Policy", "Transfer-Encoding"]
  }
}
