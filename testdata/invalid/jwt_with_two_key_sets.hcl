subject {
  jwt {
    jwks_file  = "jwks-public.json"
    jwks_url   = "https://idp.example/.well-known/jwks.json"
    issuer     = "https://idp.example/"
    audience   = ["orders-api"]
    algorithms = ["ES256"]
  }
}
