route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  request_headers {
    set = { "X-Forwarded-For" = "10.0.0.1" }
  }
}
