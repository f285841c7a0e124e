subject {
  jwt {
    issuer     = "https://idp.example/"
    audience   = ["orders-api"]
    algorithms = ["ES256"]
  }
}
