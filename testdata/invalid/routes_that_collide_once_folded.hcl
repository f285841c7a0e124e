route "orders" {
  path             = "/orders"
  upstream         = "http://127.0.0.1:9000"
  case_insensitive = true
}

route "orders.upper" {
  path     = "/Orders"
  upstream = "http://127.0.0.1:9000"
}

route "items" {
  path              = "/items"
  upstream          = "http://127.0.0.1:9000"
  ignore_extensions = [".json"]
}

route "items.json" {
  path     = "/items.json"
  upstream = "http://127.0.0.1:9000"
}
