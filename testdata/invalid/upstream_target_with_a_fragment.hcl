upstream "legacy-orders" {
  targets = ["http://10.0.0.11:9000/api#v2"]
}

route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
