upstream "legacy-orders" {
  targets = []
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
