listen {
  https = ":8443"
}

tls {
  hsts_max_age = "500ms"
  certificate {
    cert_file = "../secrets/fake-hmac-v1.txt"
    key_file  = "../secrets/fake-hmac-v1.txt"
  }
}
