subject {
  jwt {
    jwks_url   = "http://idp.example/.well-known/jwks.json"
    issuer     = "https://idp.example/"
    audience   = ["orders-api"]
    algorithms = ["ES256"]
  }
}
