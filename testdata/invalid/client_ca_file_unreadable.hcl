listen {
  https = ":8443"
}
tls {
  acme {
    domains = ["api.example.com"]
  }
  client_ca_file = "no-such-ca.pem"
}
route "orders" {
  path     = "/orders"
  upstream = "http://127.0.0.1:9000"
  subject  = ["client_cert", "client_ip"]
}
