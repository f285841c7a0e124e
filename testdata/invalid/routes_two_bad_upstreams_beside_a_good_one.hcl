route "orders.read" {
  path     = "/orders"
  upstream = "http://10.0.0.11:9000?x=1"
}

route "orders.write" {
  path     = "/orders/new"
  upstream = "http://10.0.0.12:9000"
}

route "orders.admin" {
  path     = "/orders/admin"
  upstream = "http://[::1"
}
