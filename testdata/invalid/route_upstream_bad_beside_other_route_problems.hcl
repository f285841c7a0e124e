route "orders.read" {
  path        = "/orders"
  upstream    = "http://10.0.0.11:9000?x=1"
  host_header = "bad host"
  subject     = ["nope"]
}

route "orders.again" {
  path     = "/orders"
  upstream = "http://[::1"
}
