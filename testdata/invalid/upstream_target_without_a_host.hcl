upstream "legacy-orders" {
  targets = ["http:///api", "https://"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
