route "orders.read" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
  subject  = ["ja4", "ja4+client_ip", "client_ip"]
}
