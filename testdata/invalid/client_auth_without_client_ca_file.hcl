listen {
  https = ":8443"
}
tls {
  acme {
    domains = ["api.example.com"]
  }
  client_auth = "request"
}
