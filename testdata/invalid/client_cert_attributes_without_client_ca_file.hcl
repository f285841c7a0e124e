route "orders" {
  path                 = "/orders"
  upstream             = "http://127.0.0.1:9000"
  subject              = ["client_cert", "client_ip"]
  client_cert_identity = "subject_cn"
  client_cert_header   = "X-Client-Cert"
}
