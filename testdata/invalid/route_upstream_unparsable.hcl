route "orders.read" {
  path     = "/orders"
  upstream = "http://[::1"
}
