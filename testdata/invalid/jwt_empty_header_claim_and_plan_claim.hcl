subject {
  jwt {
    jwks_url   = "https://idp.example/.well-known/jwks.json"
    issuer     = "https://idp.example/"
    audience   = ["orders-api"]
    algorithms = ["RS256"]
    header     = ""
    claim      = ""
    plan_claim = ""
  }
}
