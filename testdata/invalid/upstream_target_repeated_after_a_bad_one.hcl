upstream "legacy-orders" {
  targets = ["http://10.0.0.11:9000", "10.0.0.12:9000", "http://10.0.0.11:9000/"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
