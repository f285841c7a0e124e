route "orders.read" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
  subject  = ["jwt", "client_ip"]
}
