route "orders.read" {
  path     = "/orders"
  upstream = "ws://10.0.0.11:9000"
}
