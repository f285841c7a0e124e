subject {
  jwt {
    jwks_file  = "jwks-private.json"
    issuer     = "https://idp.example/"
    audience   = ["orders-api"]
    algorithms = ["ES256"]
  }
}
