route "orders.read" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
}

route "orders.read" {
  path     = "/orders/v2"
  upstream = "http://127.0.0.1:9000"
}
