upstream "legacy-orders" {
  targets = ["http://10.0.0.11:9000", "http://10.0.0.12:9000"]
  health {
    path     = "/healthz"
    interval = "1s"
    timeout  = "3s"
  }
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
