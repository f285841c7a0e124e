upstream "legacy-orders" {
  targets = ["http://[::1", "http://10.0.0.11:port"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
