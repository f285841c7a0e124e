listen {
  https = ":8443"
}
tls {
  acme {
    domains = ["api.example.com"]
  }
  client_ca_file = "client-ca.pem"
  client_auth    = "optional"
}
