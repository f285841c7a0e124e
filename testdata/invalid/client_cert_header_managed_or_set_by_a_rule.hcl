listen {
  https = ":8443"
}
tls {
  acme {
    domains = ["api.example.com"]
  }
  client_ca_file = "client-ca.pem"
}
route "orders" {
  path               = "/orders"
  upstream           = "http://127.0.0.1:9000"
  client_cert_header = "X-Forwarded-For"
}
route "billing" {
  path                 = "/billing"
  upstream             = "http://127.0.0.1:9000"
  client_cert_identity = "uri_san"
  client_cert_header   = "X-Client-Cert"
  request_headers {
    set = { "x-client-cert" = "spoofed" }
  }
}
route "users" {
  path                 = "/users"
  upstream             = "http://127.0.0.1:9000"
  client_cert_identity = "dns_san"
}
