upstream "legacy" {
  targets             = ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]
  max_ejected_percent = 150
}

route "orders" {
  path     = "/orders"
  upstream = "legacy"
}
