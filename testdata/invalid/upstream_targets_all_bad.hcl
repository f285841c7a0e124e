upstream "legacy-orders" {
  targets = ["ftp://10.0.0.11", "http://10.0.0.12:9000#x"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
