upstream "legacy-orders" {
  targets = [for t in ["http://10.0.0.11:9000", "ftp://10.0.0.12", "http://[::1"] : t]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
