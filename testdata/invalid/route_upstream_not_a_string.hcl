route "orders.read" {
  path     = "/orders"
  upstream = ["http://10.0.0.11:9000"]
}
