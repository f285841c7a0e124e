upstream "legacy-orders" {
  targets = ["ws://10.0.0.11:9000"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
