route "orders.read" {
  path     = "/orders"
  upstream = ""
}
