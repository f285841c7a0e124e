upstream "legacy-orders" {
  targets = ["http://10.0.0.11:9000"]
  health {
    interval = "5s"
  }
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
