route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  request_headers {
    set    = { "X-Gateway" = "edge", "x-gateway" = "edge-2" }
    remove = ["X-Debug", "x-debug"]
  }
  response_headers {
    set    = { "Cache-Control" = "no-store" }
    remove = ["Cache-Control"]
  }
}
