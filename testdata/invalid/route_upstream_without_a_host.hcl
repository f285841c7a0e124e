route "orders.read" {
  path     = "/orders"
  upstream = "http:///api"
}
