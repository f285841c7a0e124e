route "orders.read" {
  path     = "/api/v1/orders"
  upstream = "http://127.0.0.1:9000"
  request_headers {
    set    = { "X-Gateway" = "edge\r\nX-Admin: yes", "X Spaced" = "1", "X-Empty" = "" }
    remove = ["X-Debug:"]
  }
}
